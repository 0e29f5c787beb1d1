// Structured outputs end to end: `llmk serve` on SmolLM2-135M-Instruct and
// the openai SDK (tests/structured/structured_outputs_check.py): every one of the
// 20 schemas under tests/structured/schemas as a strict json_schema response_format
// gives JSON the jsonschema package validates; json_object, regex, EBNF
// grammar and choice replies follow their grammar; bad grammars get a 400
// naming the field, and the server keeps serving.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>

#include "core/grammar.hpp"
#include "support/command.hpp"
#include "support/model_cache.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

TEST_CASE("Structured outputs through the openai SDK follow every schema, regex and grammar on SmolLM2",
          "[serve][structured]") {
  // SmolLM2's forward for 20 schemas and the rest ran past 300 s under ASan
  // and UBSan on two cores; the grammar path is sanitized on stories260K
  // (test_structured_speculation.cpp, test_grammar.cpp) and the request
  // fields by test_structured_json.cpp.
  LLMK_SKIP_WHEN_SANITIZED("SmolLM2's forward for every schema: over 300 s under the sanitizers");
  if (!llmk::structured_outputs_available()) LLMK_SKIP(llmk::structured_outputs_missing());
  if (!llmk::test::have_venv_python()) LLMK_SKIP("no .venv with the openai package (scripts/setup.sh makes it)");
  if (llmk::test::run_command(llmk::test::venv_python() + " -c 'import jsonschema, openai' 2>&1").status != 0)
    LLMK_SKIP("the venv lacks jsonschema or openai (scripts/setup.sh installs them)");
  if (!std::filesystem::is_regular_file(llmk::test::smollm2_file()))
    LLMK_SKIP("no SmolLM2 chat model in the model cache (scripts/setup.sh downloads it)");
  const auto r = llmk::test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + llmk::test::venv_python() +
                                         " " LLMK_SOURCE_DIR "/tests/structured/structured_outputs_check.py --llmk " LLMK_BINARY_DIR
                                         "/bin/llmk --model " + llmk::test::smollm2_file().string() + " 2>&1");
  std::printf("%s", r.out.c_str());
  INFO(r.out);
  CHECK(r.status == 0);
}

#endif
