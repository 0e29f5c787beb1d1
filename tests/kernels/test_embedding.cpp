#include <catch2/catch.hpp>

#include <vector>

#include "core/dtype.hpp"
#include "kernels/cpu/embedding.hpp"

TEST_CASE("embedding gathers rows of f32, f16 and bf16 tables exactly", "[embedding]") {
  const int64_t vocab = 11, dim = 37;
  std::vector<float> table(vocab * dim);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.37f - 50.0f;
  std::vector<uint16_t> h(table.size()), b(table.size());
  for (size_t i = 0; i < table.size(); ++i) h[i] = llmk::f32_to_f16(table[i]), b[i] = llmk::f32_to_bf16(table[i]);
  const std::vector<int32_t> ids{10, 0, 3, 3};
  std::vector<float> out(ids.size() * dim);
  using llmk::kernels::cpu::embedding;
  REQUIRE(embedding(table.data(), LLMK_DTYPE_F32, dim, ids.data(), 4, out.data()));
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t i = 0; i < dim; ++i) CHECK(out[t * dim + i] == table[ids[t] * dim + i]);
  REQUIRE(embedding(h.data(), LLMK_DTYPE_F16, dim, ids.data(), 4, out.data()));
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t i = 0; i < dim; ++i) CHECK(out[t * dim + i] == llmk::f16_to_f32(h[ids[t] * dim + i]));
  REQUIRE(embedding(b.data(), LLMK_DTYPE_BF16, dim, ids.data(), 4, out.data()));
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t i = 0; i < dim; ++i) CHECK(out[t * dim + i] == llmk::bf16_to_f32(b[ids[t] * dim + i]));
  CHECK_FALSE(embedding(b.data(), LLMK_DTYPE_I8, dim, ids.data(), 4, out.data()));
}
