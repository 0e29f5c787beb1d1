// bench/write_dummy_weights.py (NumPy) against make_dummy_checkpoint (C++):
// the files it writes for the llama.cpp comparison must hold llmk's dummy
// weights bit for bit, in the safetensors folder and in the GGUF file (whose
// Q/K rows llama.cpp's converter permutes and llmk's reader restores).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/checkpoint.hpp"
#include "core/gguf_checkpoint.hpp"
#include "core/gguf_test_support.hpp"
#include "core/safetensors_writer.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;
namespace fs = std::filesystem;

namespace {

void check_same_tensors(const Checkpoint& want, const Checkpoint& got, const std::string& what) {
  INFO(what);
  REQUIRE(got.tensors().size() == want.tensors().size());
  for (const auto& [name, t] : want.tensors()) {
    INFO(name);
    REQUIRE(got.has(name));
    const TensorView& g = got.tensor(name);
    CHECK(g.dtype == t.dtype);
    REQUIRE(g.shape == t.shape);
    CHECK(std::memcmp(g.data, t.data, t.nbytes()) == 0);
  }
}

}  // namespace

TEST_CASE("write_dummy_weights.py writes llmk's dummy weights bit for bit as safetensors and as GGUF",
          "[dummy][gguf]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf and numpy is absent");
  // stories260K's shape: GQA (8 heads, 4 KV heads), tied embeddings, and a
  // 512-piece tokenizer for the GGUF's vocabulary; odd sizes (172) included.
  const std::string shape_dir = std::string(LLMK_SHARED_DIR) + "/models/stories260K";
  const uint64_t seed = GENERATE(0u, 12345u);
  INFO("seed " << seed);
  TempDir dir;
  const std::string cmd = venv_python() + " " + std::string(LLMK_SOURCE_DIR) + "/bench/write_dummy_weights.py " +
                          dir.path().string() + " --config " + shape_dir + "/config.json --tokenizer " + shape_dir +
                          "/tokenizer.model --seed " + std::to_string(seed) + " --gguf-name m.gguf >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);

  const auto safetensors = load_checkpoint(dir.path() / "hf");
  const auto gguf = load_gguf_checkpoint(dir.path() / "m.gguf");
  CHECK(gguf->config() == safetensors->config());
  const auto dummy = make_dummy_checkpoint(safetensors->config(), seed, {});
  check_same_tensors(*dummy, *safetensors, "safetensors");
  check_same_tensors(*dummy, *gguf, "GGUF");
}
