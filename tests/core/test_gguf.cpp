// The GGUF reader against files written by PyPI's gguf (llama.cpp's own
// writer and quantizers), and against hand-made malformed files: every
// malformation is an Error(bad_checkpoint) naming what and where.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/gguf.hpp"
#include "core/gguf_types.hpp"
#include "core/gguf_test_support.hpp"
#include "core/safetensors_writer.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::test;
using Catch::Contains;

namespace {

std::vector<float> read_floats(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(raw.size() / 4);
  std::memcpy(out.data(), raw.data(), out.size() * 4);
  return out;
}

// The message of the Error that validating `bytes` throws.
std::string parse_error(const std::string& bytes) {
  try {
    GgufFile f(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem.gguf");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::bad_checkpoint);
    return e.what();
  }
  FAIL("the malformed file was accepted");
  return "";
}

// A valid file: two metadata keys, one F32 tensor "w" of dims [4, 2].
struct Valid {
  uint32_t magic = GgufFile::kMagic, version = 3, tensor_type = 0, alignment = 32;
  uint64_t num_tensors = 1, num_kv = 2, tensor_offset = 0, data_bytes = 32;
  std::vector<uint64_t> dims{4, 2};
  std::string bytes() const {
    GgufBytes b;
    b.u32(magic).u32(version).u64(num_tensors).u64(num_kv);
    b.kv_str("general.architecture", "llama").kv_u32("general.alignment", alignment);
    b.tensor("w", dims, tensor_type, tensor_offset);
    b.pad_to(alignment);
    b.bytes.append(data_bytes, '\x01');
    return b.bytes;
  }
};

}  // namespace

TEST_CASE("GGUF metadata of every value type reads back as PyPI gguf wrote it", "[gguf]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  const auto file = dir.path() / "m.gguf";
  REQUIRE(run_gguf_writer("metadata " + file.string()));
  const GgufFile f(file);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.data_offset() % 64 == 0);
  auto get = [&](const char* key) -> const GgufValue& {
    const GgufValue* v = f.find(key);
    REQUIRE(v != nullptr);
    return *v;
  };
  CHECK(get("general.architecture").string == "llama");
  CHECK((get("t.u8").type == GgufValueType::u8 && get("t.u8").integer == 200));
  CHECK((get("t.i8").type == GgufValueType::i8 && get("t.i8").integer == -100));
  CHECK((get("t.u16").type == GgufValueType::u16 && get("t.u16").integer == 60000));
  CHECK((get("t.i16").type == GgufValueType::i16 && get("t.i16").integer == -30000));
  CHECK((get("t.u32").type == GgufValueType::u32 && get("t.u32").integer == 4000000000LL));
  CHECK((get("t.i32").type == GgufValueType::i32 && get("t.i32").integer == -2000000000LL));
  CHECK((get("t.f32").type == GgufValueType::f32 && get("t.f32").real == 0.25));
  CHECK((get("t.bool").type == GgufValueType::boolean && get("t.bool").integer == 1));
  CHECK(get("t.string").string == "h\xC3\xA9llo w\xC3\xB6rld");
  CHECK((get("t.u64").type == GgufValueType::u64 && get("t.u64").is_huge_u64));
  CHECK((get("t.i64").type == GgufValueType::i64 && get("t.i64").integer == -9000000000000000000LL));
  CHECK((get("t.f64").type == GgufValueType::f64 && get("t.f64").real == -1.5e300));
  const GgufValue& ints = get("t.ints");
  REQUIRE(ints.type == GgufValueType::array);
  REQUIRE(ints.elements.size() == 3);
  CHECK(ints.elements[1].integer == -2);
  const GgufValue& strings = get("t.strings");
  REQUIRE(strings.elements.size() == 3);
  CHECK((strings.elements[0].string == "a" && strings.elements[1].string.empty() && strings.elements[2].string == "ccc"));
  const GgufValue& nested = get("t.nested");
  REQUIRE(nested.element_type == GgufValueType::array);
  REQUIRE(nested.elements.size() == 3);
  CHECK(nested.elements[0].elements.size() == 2);
  CHECK(nested.elements[0].elements[1].integer == 2);
  CHECK(nested.elements[2].element_type == GgufValueType::string);
  CHECK(nested.elements[2].elements[1].string == "yz");

  REQUIRE(f.tensors().size() == 3);
  const GgufTensorInfo* c = f.find_tensor("c");
  REQUIRE(c != nullptr);
  CHECK(c->shape() == std::vector<int64_t>{2, 3, 4});
  CHECK(c->dims == std::vector<uint64_t>{4, 3, 2});
  CHECK(c->nbytes == 96);
  CHECK(c->offset % 64 == 0);
  const auto* values = reinterpret_cast<const float*>(f.tensor_data(*c));
  for (int i = 0; i < 24; ++i) CHECK(values[i] == static_cast<float>(i));
  const GgufTensorInfo* b = f.find_tensor("b");
  REQUIRE(b != nullptr);
  CHECK(b->type == GgmlType::f16);
  CHECK(b->shape() == std::vector<int64_t>{2, 3});
}

TEST_CASE("a file PyPI gguf wrote, truncated anywhere, is refused with a named error", "[gguf][errors]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  const auto file = dir.path() / "m.gguf";
  REQUIRE(run_gguf_writer("metadata " + file.string()));
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The writer pads after the last tensor; cutting only padding leaves a valid file.
  const GgufFile whole(file);
  uint64_t end = 0;
  for (const GgufTensorInfo& t : whole.tensors()) end = std::max(end, whole.data_offset() + t.offset + t.nbytes);
  REQUIRE(end > 500);
  REQUIRE(end <= bytes.size());
  for (size_t n = 0; n < end; ++n) {
    INFO("truncated to " << n << " of " << bytes.size() << " bytes");
    const std::string message = parse_error(bytes.substr(0, n));
    CHECK_THAT(message, Contains("truncated") || Contains("too short") || Contains("past the end"));
  }
}

TEST_CASE("every GGUF decoder equals gguf.quants bit for bit on random and edge blocks", "[gguf][quants]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  const uint32_t seed = GENERATE(1u, 2u);
  REQUIRE(run_gguf_writer("quants " + dir.path().string() + " " + std::to_string(seed)));
  for (const char* name : {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                           "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4"}) {
    INFO("type " << name << ", seed " << seed);
    const GgufFile f(dir.path() / (std::string(name) + ".gguf"));
    const GgufTensorInfo* t = f.find_tensor("t");
    REQUIRE(t != nullptr);
    CHECK(std::string(ggml_type_info(static_cast<uint32_t>(t->type))->name) == name);
    CHECK(t->shape()[0] == 7);
    const std::vector<float> want = read_floats(dir.path() / (std::string(name) + ".f32"));
    REQUIRE(want.size() == t->numel());
    std::vector<float> got(want.size());
    dequantize_ggml(t->type, f.tensor_data(*t), got.data(), static_cast<int64_t>(got.size()));
    size_t num_different = 0, num_nonzero = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      num_different += std::memcmp(&got[i], &want[i], 4) == 0 ? 0 : 1;  // bits: NaN payloads and -0 included
      num_nonzero += want[i] != 0.0f ? 1 : 0;
    }
    CHECK(num_different == 0);
    CHECK(num_nonzero > want.size() / 2);  // the blocks were not all zero
  }
}

TEST_CASE("every ggml type id has PyPI gguf's name and block sizes", "[gguf][quants]") {
  if (!have_gguf_python()) LLMK_SKIP("the project venv with PyPI gguf is absent");
  TempDir dir;
  REQUIRE(run_gguf_writer("type-sizes " + (dir.path() / "sizes.json").string()));
  std::ifstream in(dir.path() / "sizes.json");
  const nlohmann::json sizes = nlohmann::json::parse(in);
  REQUIRE(sizes.size() >= 30);
  const std::string decodable = ", " + std::string(ggml_dequantizable_type_names()) + ",";
  for (const auto& [id, entry] : sizes.items()) {
    INFO("type id " << id << " " << entry);
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(std::stoul(id)));
    REQUIRE(info != nullptr);
    CHECK(info->name == entry[0].get<std::string>());
    CHECK(info->block_size == entry[1].get<uint32_t>());
    // gguf lists Q8_1 with two f32 fields (40 bytes); ggml's block_q8_1
    // holds two halves (36). It is a matmul intermediate no file holds.
    if (std::string(info->name) != "Q8_1") CHECK(info->type_size == entry[2].get<uint32_t>());
    CHECK((decodable.find(", " + std::string(info->name) + ",") != std::string::npos) == info->can_dequantize);
  }
  // Ids ggml retired (repacked Q4_0 / IQ4_NL) still have sizes; 4, 5 were
  // never in a GGUF file.
  CHECK(ggml_type_info(31)->type_size == 18);
  CHECK(ggml_type_info(38)->block_size == 32);
  for (uint32_t id : {4u, 5u, 42u, 1000u}) CHECK(ggml_type_info(id) == nullptr);
}

TEST_CASE("a GGUF type that cannot be decoded, or a partial block, is refused by the decoder", "[gguf][quants]") {
  std::vector<uint8_t> block(256);
  std::vector<float> out(256);
  CHECK_THROWS_WITH(dequantize_ggml(GgmlType::iq2_xxs, block.data(), out.data(), 256),
                    Contains("IQ2_XXS cannot be loaded") && Contains("Q4_1, Q5_0, Q5_1") && Contains("IQ4_XS"));
  CHECK_THROWS_WITH(dequantize_ggml(GgmlType::q8_0, block.data(), out.data(), 31), Contains("whole number"));
  CHECK_THROWS_WITH(dequantize_ggml(GgmlType::q5_k, block.data(), out.data(), 255), Contains("Q5_K blocks"));
}

TEST_CASE("the hand-made valid GGUF file parses", "[gguf]") {
  const std::string bytes = Valid().bytes();
  const GgufFile f(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem.gguf");
  REQUIRE(f.tensors().size() == 1);
  CHECK(f.tensors()[0].nbytes == 32);
  CHECK(f.data_offset() % 32 == 0);
}

TEST_CASE("a GGUF file truncated anywhere is refused with a named error", "[gguf][errors]") {
  const std::string bytes = Valid().bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n << " bytes");
    const std::string message = parse_error(bytes.substr(0, n));
    CHECK_THAT(message, Contains("mem.gguf: "));
    CHECK_THAT(message, Contains("truncated") || Contains("too short") || Contains("past the end"));
  }
}

TEST_CASE("each GGUF header malformation is refused naming what and where", "[gguf][errors]") {
  struct Case {
    const char* what;
    std::string bytes;
    std::vector<std::string> fragments;
  };
  std::vector<Case> cases;
  auto with = [](auto edit) {
    Valid v;
    edit(v);
    return v.bytes();
  };
  cases.push_back({"bad magic", with([](Valid& v) { v.magic = 0x58554747; }), {"bad magic 'GGUX'", "offset 0"}});
  cases.push_back({"version 1", with([](Valid& v) { v.version = 1; }), {"version 1", "offset 4"}});
  cases.push_back({"version 4", with([](Valid& v) { v.version = 4; }), {"unsupported GGUF version 4"}});
  cases.push_back({"big-endian", with([](Valid& v) { v.version = 0x03000000; }), {"big-endian"}});
  cases.push_back({"huge tensor count", with([](Valid& v) { v.num_tensors = uint64_t(1) << 40; }),
                   {"tensor count 1099511627776 cannot fit"}});
  cases.push_back({"huge metadata count", with([](Valid& v) { v.num_kv = uint64_t(1) << 62; }),
                   {"metadata count", "cannot fit"}});
  cases.push_back({"alignment not a power of two", with([](Valid& v) { v.alignment = 24; }),
                   {"'general.alignment' = 24 is not a power of two"}});
  cases.push_back({"zero dimensions", with([](Valid& v) { v.dims = {}; }), {"tensor 'w': 0 dimensions"}});
  cases.push_back({"five dimensions", with([](Valid& v) { v.dims = {1, 1, 1, 1, 1}; }), {"tensor 'w': 5 dimensions"}});
  cases.push_back({"unknown tensor type", with([](Valid& v) { v.tensor_type = 99; }), {"tensor 'w': unknown tensor type 99"}});
  cases.push_back({"a type id ggml never used in files", with([](Valid& v) { v.tensor_type = 5; }),
                   {"tensor 'w': unknown tensor type 5"}});
  cases.push_back({"partial block", with([](Valid& v) { v.tensor_type = 8; }),
                   {"tensor 'w'", "row length 4 is not a multiple of Q8_0's block of 32"}});
  cases.push_back({"partial K-quant block", with([](Valid& v) {
                     v.tensor_type = 12;
                     v.dims = {288, 1};
                   }),
                   {"tensor 'w'", "row length 288 is not a multiple of Q4_K's block of 256"}});
  // An undecodable type is still validated by size: two IQ2_XXS rows of one
  // 66-byte block need 132 bytes.
  cases.push_back({"IQ2_XXS data one byte short", with([](Valid& v) {
                     v.tensor_type = 16;
                     v.dims = {256, 2};
                     v.data_bytes = 131;
                   }),
                   {"tensor 'w': data [0, 132) runs past the end of the data section (131 bytes"}});
  cases.push_back({"misaligned offset", with([](Valid& v) { v.tensor_offset = 4; }),
                   {"tensor 'w': data offset 4 is not a multiple of the alignment 32"}});
  cases.push_back({"offset out of range", with([](Valid& v) { v.tensor_offset = 64; }),
                   {"tensor 'w': data [64, 96) runs past the end of the data section"}});
  cases.push_back({"data truncated", with([](Valid& v) { v.data_bytes = 31; }), {"tensor 'w'", "runs past the end"}});
  cases.push_back({"absurd dims", with([](Valid& v) { v.dims = {uint64_t(1) << 40, uint64_t(1) << 40}; }),
                   {"tensor 'w'", "too large"}});

  // Field-level malformations the Valid template cannot express.
  auto head = [](uint64_t num_tensors, uint64_t num_kv) {
    GgufBytes b;
    b.u32(GgufFile::kMagic).u32(3).u64(num_tensors).u64(num_kv);
    return b;
  };
  cases.push_back({"key length past the end", head(0, 1).u64(1000).raw("abc", 3).raw(std::string(20, 'x').data(), 20).bytes,
                   {"metadata key 0 has length 1000, past the end", "offset 24"}});
  cases.push_back({"unknown value type", head(0, 1).str("k").u32(13).u32(0).bytes,
                   {"metadata key 'k': value type 13 is not a GGUF value type"}});
  cases.push_back({"bad array element type", head(0, 1).str("k").u32(9).u32(99).u64(0).bytes,
                   {"metadata key 'k': array element type 99"}});
  cases.push_back({"huge array", head(0, 1).str("k").u32(9).u32(4).u64(uint64_t(1) << 50).u32(1).bytes,
                   {"metadata key 'k': array of 1125899906842624 u32 values cannot fit"}});
  cases.push_back({"string value past the end", head(0, 1).str("k").u32(8).u64(99).raw("xy", 2).bytes,
                   {"metadata key 'k' has length 99, past the end"}});
  cases.push_back({"bool not 0 or 1", head(0, 1).str("k").u32(7).u8(2).bytes, {"metadata key 'k': bool value 2"}});
  cases.push_back({"duplicate key", head(0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes, {"metadata key 'k' appears twice"}});
  cases.push_back({"alignment of the wrong type", head(0, 1).kv_str("general.alignment", "32").bytes,
                   {"'general.alignment' is a string, not a u32"}});
  {
    GgufBytes deep = head(0, 1).str("k").u32(9);  // an array of arrays of arrays ...
    for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
    cases.push_back({"arrays nested too deep", deep.bytes, {"metadata key 'k': arrays nest deeper than 8"}});
  }
  {
    GgufBytes b = head(2, 0);
    b.tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad_to(32);
    b.bytes.append(64, '\0');
    cases.push_back({"duplicate tensor", b.bytes, {"tensor 'a' appears twice"}});
  }
  {
    GgufBytes b = head(2, 0);
    b.tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad_to(32);
    b.bytes.append(96, '\0');
    cases.push_back({"overlapping tensors", b.bytes, {"tensor 'b': data at offset 32 overlaps tensor 'a' ([0, 64))"}});
  }

  for (const Case& c : cases) {
    INFO(c.what);
    const std::string message = parse_error(c.bytes);
    CHECK_THAT(message, Contains("mem.gguf: "));
    for (const std::string& fragment : c.fragments) CHECK_THAT(message, Contains(fragment));
  }
}

TEST_CASE("a GGUF file that does not exist, or is not GGUF, is told apart", "[gguf][errors]") {
  TempDir dir;
  CHECK_THROWS_WITH(GgufFile(dir.path() / "absent.gguf"), Contains("absent.gguf") && Contains("cannot open"));
  write_file(dir.path() / "x.gguf", Valid().bytes());
  CHECK(is_gguf_file(dir.path() / "x.gguf"));
  write_file(dir.path() / "y.bin", "GGU");
  CHECK_FALSE(is_gguf_file(dir.path() / "y.bin"));
  CHECK_FALSE(is_gguf_file(dir.path()));
}
