// libFuzzer harness for the two request parsers the servers run on every
// client's bytes: ZeroMQ protocol messages and OpenAI HTTP bodies (both
// endpoints). Any input either parses or throws the documented errors
// (ProtocolError, or llmk::Error with its ParamError kind); anything else, a
// crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "ipc/errors.hpp"
#include "ipc/openai.hpp"
#include "ipc/zmq_protocol.hpp"

namespace {

// A backend that serves requests no further than parsing needs.
class ParseOnlyBackend final : public llmk::ipc::Backend {
 public:
  void submit(llmk::Request, EventCallback) override {}
  bool cancel(const std::string&) override { return false; }
  llmk::EngineStats stats() const override { return {}; }
  uint32_t flush_cache() override { return 0; }
  llmk::ipc::ModelInfo model_info() const override { return {"fuzz-model", 256, 512, "", 16}; }
  std::string token_text(int32_t) const override { return ""; }
};

template <class Fn>
void expect_documented_errors(Fn&& fn) {
  try {
    fn();
  } catch (const llmk::ipc::ProtocolError&) {
  } catch (const llmk::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  static const ParseOnlyBackend backend;
  expect_documented_errors([&] { llmk::ipc::parse_client_message(body, 256, 512); });
  expect_documented_errors([&] { llmk::ipc::error_reply_id(body); });
  expect_documented_errors(
      [&] { llmk::ipc::parse_openai_request(llmk::ipc::OpenAiEndpoint::completions, body, backend); });
  expect_documented_errors([&] { llmk::ipc::parse_openai_request(llmk::ipc::OpenAiEndpoint::chat, body, backend); });
  return 0;
}
