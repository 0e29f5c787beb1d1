// Beam search through `llmk serve` and the openai SDK (vLLM's extra fields in
// extra_body): every case of tests/beam_reference.py's float64 search comes
// back as the reference's hypotheses, best first, as text; a chat request
// searches too; requests beam search cannot serve are refused with a 400
// naming the field; and over ZeroMQ the finals carry the reference's token
// ids and scores.
#ifdef LLMK_HAVE_ENGINE

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/tokenizer.hpp"
#include "serve_process.hpp"
#include "support.hpp"
#include "support/command.hpp"
#include "support/skip.hpp"
#include "support/venv.hpp"

using namespace llmk;
using llmk::test::ServeProcess;
using nlohmann::json;

namespace {

namespace fs = std::filesystem;

json run_python(const std::string& script_and_args, const std::string& input) {
  const fs::path in = fs::temp_directory_path() / ("llmk_beam_serve_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(in) << input;
  const test::CommandResult r = test::run_command("NO_PROXY=127.0.0.1 no_proxy=127.0.0.1 " + test::venv_python() +
                                                  " " + script_and_args + " < " + in.string());
  fs::remove(in);
  INFO(r.out);
  REQUIRE(r.status == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("The openai SDK's beam search requests get the float64 reference's hypotheses from llmk serve",
          "[serve][beam]") {
  if (!test::have_venv_python()) LLMK_SKIP("no .venv with numpy and the openai package (scripts/setup.sh makes it)");
  if (ServeProcess::parallel_ranks() > 1) LLMK_SKIP("the serve binary runs here as one process only");
  const json ref = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/beam_reference.py " LLMK_SHARED_DIR
                                                             "/models/stories260K",
                              "");
  ServeProcess serve({"--set", "kv_cache.dtype=f32", "--set", "model.chat_template=chatml"});
  REQUIRE(serve.wait_ready());
  INFO(serve.log());
  const json got = run_python(std::string(LLMK_SOURCE_DIR) + "/tests/ipc/openai_beam_client.py " +
                                  std::to_string(serve.http_port()),
                              ref.dump());
  const Tokenizer tokenizer(fs::path(LLMK_SHARED_DIR) / "models/stories260K/tokenizer.model");
  const json& cases = ref["cases"];
  REQUIRE(got["completions"].size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    INFO("case " << c["name"].get<std::string>());
    REQUIRE(c["margin"].get<double>() >= 1e-3);
    const std::vector<int32_t> prompt = c["prompt"];
    REQUIRE(got["completions"][i].size() == c["outputs"].size());
    for (size_t k = 0; k < c["outputs"].size(); ++k) {
      const json& want = c["outputs"][k];
      std::vector<int32_t> tokens = want["tokens"];
      if (want["reason"] == "stop") tokens.pop_back();  // the stop token is not text
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), tokens.begin(), tokens.end());
      // The text after the prompt's, compared without a leading space (as
      // the embeddings serve test compares continuations).
      std::string want_text = tokenizer.decode(all).substr(tokenizer.decode(prompt).size());
      std::string text = got["completions"][i][k]["text"];
      want_text.erase(0, want_text.find_first_not_of(' '));
      text.erase(0, text.find_first_not_of(' '));
      CHECK(text == want_text);
      CHECK(got["completions"][i][k]["finish_reason"] == want["reason"]);
    }
  }
  REQUIRE(got["chat"].size() == 2);
  CHECK(got["chat"][0]["text"] != got["chat"][1]["text"]);  // two different hypotheses

  const json& bad = got["bad"];
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"temperature", "temperature"},     {"stream", "stream"},
      {"n above the width", "n"},         {"early_stopping", "early_stopping"},
      {"length_penalty alone", "length_penalty"}, {"top_p", "top_p"},
      {"width past the bound", "best_of"}, {"best_of without beams", "best_of"}};
  for (const auto& [name, param] : refused) {
    INFO(name);
    CHECK(bad[name]["status"] == 400);
    CHECK(bad[name]["param"] == param);
  }

  // The ZeroMQ protocol: beam_width in params, the hypotheses' token ids and scores in the finals.
  test::RawPeer peer(serve.zmq_endpoint());
  for (const json& c : cases) {
    INFO("ZeroMQ, case " << c["name"].get<std::string>());
    const std::string id = c["name"];
    peer.send_json({{"v", 1}, {"type", "submit"}, {"id", id}, {"prompt_token_ids", c["prompt"]}, {"stream", false},
                    {"params", {{"beam_width", c["width"]}, {"n", c["n"]}, {"max_tokens", c["max_tokens"]},
                                {"temperature", 0}, {"length_penalty", c["length_penalty"]},
                                {"early_stopping", c["early_stopping"]}, {"stop_token_ids", c["stop_token_ids"]}}}});
    std::map<int, json> finals;
    for (bool done = false; !done;) {
      const json msg = peer.recv_json(std::chrono::seconds(60));
      REQUIRE(msg.is_object());
      REQUIRE(msg["type"] == "final");
      finals[msg["index"].get<int>()] = msg;
      done = msg["done"] == true;
    }
    REQUIRE(finals.size() == c["outputs"].size());
    for (size_t k = 0; k < finals.size(); ++k) {
      const json& want = c["outputs"][k];
      const json& f = finals[int(k)];
      CHECK(f["token_ids"] == want["tokens"]);
      CHECK(f["finish_reason"] == want["reason"]);
      CHECK(std::fabs(f["beam"]["cumulative_logprob"].get<double>() - want["cumulative_logprob"].get<double>()) < 5e-5);
      CHECK(std::fabs(f["beam"]["score"].get<double>() - want["score"].get<double>()) < 5e-5);
    }
  }
}

#endif  // LLMK_HAVE_ENGINE
