// Where scripts/setup.sh keeps the real trained model the tests use:
// $LLMK_MODEL_CACHE/models, else ~/.cache/llmk/models.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace llmk::test {

inline std::filesystem::path smollm2_file() {
  const char* cache = std::getenv("LLMK_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root =
      cache && *cache ? std::filesystem::path(cache) : std::filesystem::path(home ? home : "") / ".cache" / "llmk";
  return root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace llmk::test
