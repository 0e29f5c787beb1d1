// KV memory of beam search and of n > 1 parallel sampling: K/V shared by
// the allocator's fork (kv.paged: whole blocks shared, a partial block
// copied on write) against every beam or sample holding its own copy.
//
// One request at a time runs through the Scheduler over the model's real
// forward and sampler. After each plan (every sequence's K/V then reaches
// its newest token) it records the slots kv.paged holds for the request
// (usage().reserved_slots) and the slots copies would take: each live
// sequence's own ceil(length / block_size) blocks. Also the slots moved by
// copies (the plan's kv_copies): copy-on-write's partial blocks, against
// what kv.contiguous moves (each fork copies the parent's whole K/V) in a
// second run of the same request.
//
//   bench_beam_kv [--model DIR|GGUF] [--preset NAME] [--prompt-tokens 60]
//       [--max-tokens 64] [--block-size 16] [--widths 4,8] [--samples 4,8]
//       [--threads 2]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "bench/engine_bench_common.hpp"
#include "core/checkpoint.hpp"
#include "core/model.hpp"
#include "core/model_runtime.hpp"
#include "core/plugin_loader.hpp"
#include "core/sampler.hpp"
#include "core/scheduler.hpp"
#include "core/tokenizer.hpp"

using namespace llmk;
using namespace llmk::bench_programs;

namespace {

struct Figures {
  uint64_t peak_shared = 0;     // slots the allocator held, at the peak
  uint64_t peak_copied = 0;     // slots per-sequence copies would hold, at the peak
  uint64_t slots_moved = 0;     // slots the plans' copies moved
  int32_t steps = 0;
  int32_t generated = 0;        // tokens of the outputs
};

std::vector<int> list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

// A prompt of `n` tokens: a story through the model's tokenizer when it
// has one this program can read, else fixed pseudo-random ids.
std::vector<int32_t> make_prompt(const Checkpoint& ckpt, const ModelConfig& model, int n) {
  std::vector<int32_t> ids;
  try {
    if (!ckpt.tokenizer_path().empty() && std::filesystem::is_regular_file(ckpt.tokenizer_path())) {
      const Tokenizer tok(ckpt.tokenizer_path());
      std::string text;
      while (static_cast<int>(ids.size()) < n) {
        text += "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
                "her dog. One day, she saw a big red ball under a tree and ran to get it. ";
        ids = tok.encode(text, true);
      }
    }
  } catch (const std::exception&) {
    ids.clear();
  }
  if (ids.empty()) {
    ids.push_back(model.bos_token_id);
    uint32_t x = 12345;
    while (static_cast<int>(ids.size()) < n) {
      x = x * 1664525u + 1013904223u;
      ids.push_back(static_cast<int32_t>(3 + (x >> 8) % static_cast<uint32_t>(std::min(model.vocab_size, 2000) - 3)));
    }
  }
  ids.resize(static_cast<size_t>(n));
  return ids;
}

Figures run(Model& model, PluginRegistry& plugins, const ModelRuntime& rt, const std::string& allocator,
            uint32_t block, const std::vector<int32_t>& prompt, const SamplingParams& sp) {
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), rt.num_kv_slots, block, rt.max_seq_len, 0, "{}",
                                    nullptr, nullptr};
  KvAllocatorImpl kv(plugins.load(allocator, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerSection section;
  section.max_num_seqs = 16;
  section.max_num_batched_tokens = 512;
  Scheduler sched(section, SchedulerLimits{int32_t(rt.max_seq_len), model.config().eos_token_ids,
                                           model.config().vocab_size},
                  kv);
  const int32_t vocab = model.config().vocab_size;
  Sampler sampler(vocab, 1);
  sched.add_request("r", prompt, sp);
  Figures f;
  std::vector<float> logits;
  while (sched.has_work()) {
    StepPlan plan = sched.schedule();
    if (plan.empty()) continue;
    uint64_t copied = 0;
    for (const ScheduledSeq& s : plan.seqs) {
      const Sequence& seq = *sched.sequence(s.seq_id);
      copied += (static_cast<uint64_t>(seq.num_tokens()) + block - 1) / block * block;
    }
    f.peak_shared = std::max<uint64_t>(f.peak_shared, kv.usage().reserved_slots);
    f.peak_copied = std::max(f.peak_copied, copied);
    for (const llmk_kv_copy& c : plan.batch.kv_copies) f.slots_moved += static_cast<uint64_t>(c.num_slots);
    f.steps += 1;
    logits.resize(size_t(plan.batch.num_logits()) * size_t(vocab));
    model.forward(plan.batch, logits.data());
    std::vector<SampledToken> rows;
    for (size_t i = 0; i < plan.logits.size(); ++i) {
      const LogitsTarget& t = plan.logits[i];
      const Sequence& seq = *sched.sequence(t.seq_id);
      SamplerRow row;
      row.logits = logits.data() + i * size_t(vocab);
      row.params = t.sampling.get();
      row.prompt_ids = std::span<const int32_t>(seq.tokens.data(), size_t(seq.num_prompt_tokens));
      row.generated_ids = std::span<const int32_t>(seq.tokens.data() + seq.num_prompt_tokens,
                                                   size_t(seq.num_generated_tokens()));
      row.seed = *t.sampling->seed;
      row.sample_index = uint32_t(t.sample_index);
      rows.push_back(sampler.sample_one(row));
    }
    std::vector<int32_t> ids;
    for (const SampledToken& r : rows) ids.push_back(r.token_id);
    for (const TokenEvent& e : sched.update_from_output(plan, ids, &rows)) {
      if (e.token_id) f.generated += 1;
      if (e.finish_reason == FinishReason::error) throw Error(ErrorCode::internal, e.error);
    }
  }
  return f;
}

void report(const char* what, int k, const Figures& paged, const Figures& contiguous) {
  std::printf("%-22s %2d | %9llu %9llu %6.2fx | %10llu %10llu | %5d %6d\n", what, k,
              static_cast<unsigned long long>(paged.peak_shared), static_cast<unsigned long long>(paged.peak_copied),
              paged.peak_shared > 0 ? double(paged.peak_copied) / double(paged.peak_shared) : 0.0,
              static_cast<unsigned long long>(paged.slots_moved),
              static_cast<unsigned long long>(contiguous.slots_moved), paged.steps, paged.generated);
}

}  // namespace

int main(int argc, char** argv) try {
  const Flags f(argc, argv,
                {{"preset", "llama-110m"}, {"model", LLMK_SHARED_DIR "/models/stories260K"}, {"threads", "2"},
                 {"prompt-tokens", "60"}, {"max-tokens", "64"}, {"block-size", "16"}, {"widths", "4,8"},
                 {"samples", "4,8"}, {"set", ""}});
  f.print();
  EngineConfig cfg = base_config(f);
  const uint32_t block = static_cast<uint32_t>(f.num("block-size"));
  const int max_tokens = f.num("max-tokens");
  cfg.kv_cache.block_size = block;
  cfg.kv_cache.dtype = DType::f32;
  cfg.kv_cache.max_seq_len = static_cast<uint32_t>(f.num("prompt-tokens") + max_tokens + block);
  cfg.kv_cache.capacity_tokens = cfg.kv_cache.max_seq_len * 18;  // 16 sequences of kv.contiguous, and slack
  const std::shared_ptr<const Checkpoint> ckpt = open_model(cfg.model);
  const ModelRuntime rt = resolve_runtime(cfg, *ckpt);
  PluginRegistry plugins;
  Model model(ckpt, plugins, cfg, rt);
  const std::vector<int32_t> prompt = make_prompt(*ckpt, model.config(), f.num("prompt-tokens"));
  std::printf("prompt %zu tokens, at most %d generated, block size %u; slots of K/V (one slot: one token's K/V "
              "in every layer)\n\n",
              prompt.size(), max_tokens, block);
  std::printf("%-22s %2s | %9s %9s %7s | %10s %10s | %5s %6s\n", "request", "k", "CoW peak", "copy peak", "saving",
              "CoW moved", "copy moved", "steps", "tokens");
  for (int width : list(f.str("widths"))) {
    SamplingParams sp;
    sp.beam_width = width;
    sp.n = 1;
    sp.temperature = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    report("beam search, width", width, run(model, plugins, rt, "kv.paged", block, prompt, sp),
           run(model, plugins, rt, "kv.contiguous", block, prompt, sp));
  }
  for (int n : list(f.str("samples"))) {
    SamplingParams sp;
    sp.n = n;
    sp.temperature = 0.8f;
    sp.seed = 1;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    report("parallel sampling, n", n, run(model, plugins, rt, "kv.paged", block, prompt, sp),
           run(model, plugins, rt, "kv.contiguous", block, prompt, sp));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_beam_kv: %s\n", e.what());
  return 1;
}
