// core/attention_metadata: the attention plugin's desc and per-step metadata,
// built once for every executor. The desc carries the model's head shape,
// the softmax scale 1/sqrt(head_dim), the runtime's KV format and limits, and
// a sliding window only where it is shorter than the context; the step
// carries the batch's host arrays and, per device, where the plugin reads
// them.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "core/attention_metadata.hpp"

namespace {

using namespace llmk;

ModelConfig gqa_model() {
  ModelConfig c;
  c.hidden_size = 192;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.num_layers = 3;
  return c;
}

ModelRuntime runtime() {
  ModelRuntime rt;
  rt.num_threads = 3;
  rt.num_kv_slots = 640;
  rt.max_seq_len = 512;
  rt.max_step_tokens = 256;
  rt.kv_dtype = DType::i8;
  rt.kv_group_size = 16;
  return rt;
}

}  // namespace

TEST_CASE("The attention desc carries the model's shape and the runtime's KV format and limits") {
  EngineConfig ecfg;
  ecfg.plugins.attention_options = R"({"prefill":"flash"})";
  ecfg.scheduler.max_num_seqs = 12;
  ecfg.kv_cache.block_size = 32;
  const ModelConfig c = gqa_model();
  const ModelRuntime rt = runtime();

  const llmk_attention_desc cpu = attention_desc(c, rt, ecfg, LLMK_DEVICE_CPU);
  CHECK(cpu.struct_size == sizeof(llmk_attention_desc));
  CHECK(cpu.num_heads == 6);
  CHECK(cpu.num_kv_heads == 2);
  CHECK(cpu.head_dim == 32);
  CHECK(cpu.scale == Approx(1.0 / std::sqrt(32.0)).epsilon(1e-7));
  CHECK(cpu.kv_dtype == LLMK_DTYPE_I8);
  CHECK(cpu.kv_group_size == 16);
  CHECK(cpu.max_context == 512);
  CHECK(cpu.max_tokens == 256);
  CHECK(cpu.num_threads == 3);
  CHECK(std::strcmp(cpu.options, R"({"prefill":"flash"})") == 0);
  CHECK(cpu.sliding_window == 0);
  CHECK(cpu.device == LLMK_DEVICE_CPU);
  CHECK(cpu.activation_dtype == LLMK_DTYPE_F32);
  CHECK(cpu.max_seqs == 12);
  // The block size is the KV allocator's, given with each step, never the config's.
  CHECK(cpu.block_size == 0);

  // A device's plugin gets one host thread; everything else is the same.
  const llmk_attention_desc cuda = attention_desc(c, rt, ecfg, LLMK_DEVICE_CUDA);
  CHECK(cuda.device == LLMK_DEVICE_CUDA);
  CHECK(cuda.num_threads == 1);
  CHECK(cuda.num_heads == cpu.num_heads);
  CHECK(cuda.scale == cpu.scale);
  CHECK(cuda.max_context == cpu.max_context);

  ecfg.scheduler.max_num_seqs = 0;
  CHECK(attention_desc(c, rt, ecfg, LLMK_DEVICE_CPU).max_seqs == 1);
}

TEST_CASE("The attention desc names a sliding window only where it is shorter than the context") {
  const EngineConfig ecfg;
  ModelConfig c = gqa_model();
  const ModelRuntime rt = runtime();  // 512 tokens of context
  c.sliding_window = 128;
  CHECK(attention_desc(c, rt, ecfg, LLMK_DEVICE_CPU).sliding_window == 128);
  c.sliding_window = 512;
  CHECK(attention_desc(c, rt, ecfg, LLMK_DEVICE_CPU).sliding_window == 0);
  c.sliding_window = 4096;
  CHECK(attention_desc(c, rt, ecfg, LLMK_DEVICE_CPU).sliding_window == 0);
}

TEST_CASE("The attention step carries the batch's arrays, read from the host or from where the device holds them") {
  StepBatch b;  // a 3-token prefill chunk and a decode, blocks of 16
  b.token_ids = {7, 8, 9, 4};
  b.positions = {0, 1, 2, 20};
  b.query_start = {0, 3, 4};
  b.context_lens = {3, 21};
  b.slot_mapping = {0, 1, 2, 36};
  b.block_tables = {0, 0, 16, 32};
  b.max_blocks_per_seq = 2;
  b.block_size = 16;
  b.logits_rows = {2, 3};

  const llmk_attention_step host = attention_step(b, 640);
  CHECK(host.struct_size == sizeof(llmk_attention_step));
  CHECK(host.num_tokens == 4);
  CHECK(host.num_seqs == 2);
  CHECK(host.max_blocks_per_seq == 2);
  CHECK(host.block_size == 16);
  CHECK(host.num_slots == 640);
  CHECK(host.query_start == b.query_start.data());
  CHECK(host.context_lens == b.context_lens.data());
  CHECK(host.slot_mapping == b.slot_mapping.data());
  CHECK(host.block_tables == b.block_tables.data());
  CHECK(host.device_query_start == b.query_start.data());
  CHECK(host.device_context_lens == b.context_lens.data());
  CHECK(host.device_slot_mapping == b.slot_mapping.data());
  CHECK(host.device_block_tables == b.block_tables.data());

  const int32_t device_arrays[4][4] = {};
  const llmk_attention_step dev =
      attention_step(b, 640, {device_arrays[0], device_arrays[1], device_arrays[2], device_arrays[3]});
  CHECK(dev.query_start == b.query_start.data());  // plan() reads the host's
  CHECK(dev.block_tables == b.block_tables.data());
  CHECK(dev.device_query_start == device_arrays[0]);
  CHECK(dev.device_context_lens == device_arrays[1]);
  CHECK(dev.device_slot_mapping == device_arrays[2]);
  CHECK(dev.device_block_tables == device_arrays[3]);
  CHECK(dev.num_tokens == host.num_tokens);
  CHECK(dev.num_seqs == host.num_seqs);
}
