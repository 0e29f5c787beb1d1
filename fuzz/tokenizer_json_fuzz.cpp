// libFuzzer harness for tokenizer.json: any bytes, as a tokenizer.json
// file, either load (JSON spec, BPE model, normalizer, pre-tokenizer and
// decoder built) or throw llmk::Error naming what is wrong. When one loads,
// a few strings taken from the input itself are encoded (with and without
// special tokens), their ids post-processed and decoded again, and every id
// decoded one at a time; nothing crashes, hangs or reads out of bounds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/tokenizer_backend.hpp"
#include "core/tokenizer_json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The backend reads a file: one per process, rewritten for each input
  // and removed at exit.
  struct TempFile {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("llmk_tokenizer_json_fuzz_" + std::to_string(::getpid()) + ".json");
    ~TempFile() {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  };
  static const TempFile temp;
  const std::filesystem::path& file = temp.path;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(size));
  try {
    const auto backend = llmk::detail::make_tokenizer_json_backend(file);
    const auto vocab_size = static_cast<int32_t>(backend->table().pieces.size());
    // Texts: fixed ones, and the input's first and last 64 bytes (often
    // parts of the vocabulary, so merges and added tokens apply).
    const std::string_view texts[] = {"Hello, world! 123", " \xe2\x96\x81spaced\n\ttabs  ", "\xff\xfe invalid UTF-8 \xc3",
                                      bytes.substr(0, 64), bytes.substr(size > 64 ? size - 64 : 0)};
    for (const std::string_view text : texts) {
      std::vector<int32_t> ids = backend->encode(text);
      backend->add_special_tokens(ids);
      for (const int32_t id : ids) {
        if (id < 0 || id >= vocab_size) __builtin_trap();  // encode must give ids of the vocabulary
      }
      backend->decode(ids);
    }
    for (int32_t id = 0; id < vocab_size && id < 256; ++id) backend->decode(std::span<const int32_t>(&id, 1));
  } catch (const llmk::Error&) {
  }
  return 0;
}
