// libFuzzer harness for the Jinja subset that renders chat templates: any
// source either parses and renders (over a small conversation) or throws
// llmk::Error naming what is wrong; nothing crashes, hangs or reads out of
// bounds. Loops are bounded by the data they walk, so rendering terminates.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.hpp"
#include "core/jinja/template.hpp"
#include "core/jinja/value.hpp"

namespace {

llmk::jinja::Dict conversation() {
  using namespace llmk::jinja;
  auto message = [](const char* role, const char* content) {
    Dict m;
    m.set("role", Value(std::string(role)));
    m.set("content", Value(std::string(content)));
    return Value(std::move(m));
  };
  Dict vars;
  vars.set("messages", Value(List{message("system", "Be brief."), message("user", "Hi"),
                                  message("assistant", "Hello."), message("user", "Why?")}));
  vars.set("bos_token", Value(std::string("<s>")));
  vars.set("eos_token", Value(std::string("</s>")));
  vars.set("add_generation_prompt", Value(true));
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const llmk::jinja::Dict vars = conversation();
  try {
    const llmk::jinja::Template tmpl(std::string_view(reinterpret_cast<const char*>(data), size));
    tmpl.render(vars);
  } catch (const llmk::Error&) {
  }
  return 0;
}
