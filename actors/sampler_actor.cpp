// The sampler actor: owns the Sampler and turns one step's logits into one
// token per logits row. Its answer goes to the scheduler (the executor
// delegated the scheduler's request to it). One thread: a second OpenMP
// team next to the executor's would spin against it between steps (measured
// on 2 cores: 8000 tok/s with one team, under 1000 with two).
#include <spdlog/spdlog.h>

#include "actors/pipeline.hpp"
#include "core/error.hpp"
#include "core/sampler.hpp"

namespace llmk {

namespace {

struct SamplerState {
  SamplerState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  std::unique_ptr<Sampler> sampler;  // made for the first step's vocabulary
  PipelineContext context;
  std::vector<SamplerRow> rows;      // reused across steps
  static inline const char* name = "sampler";
};

using SamplerPointer = sampler_actor::stateful_pointer<SamplerState>;

caf::result<StepResult> sample(SamplerPointer self, StepWork& work, std::vector<float>& logits) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("sampler", "sample", {}, work.step);
  ScopedSpan span(st.context.tracer.get(), "sample", "sampler", work.step, work.batch.num_logits());
  double start = now_s();
  const size_t vocab = static_cast<size_t>(work.vocab_size);
  if (logits.size() != work.rows.size() * vocab)
    return make_actor_error(static_cast<int>(ErrorCode::internal),
                            "sampler: " + std::to_string(logits.size()) + " logits for " +
                                std::to_string(work.rows.size()) + " rows of " + std::to_string(vocab));
  StepResult result;
  result.step = work.step;
  result.forward_s = work.forward_s;
  try {
    if (!st.sampler || st.sampler->vocab_size() != work.vocab_size)
      st.sampler = std::make_unique<Sampler>(work.vocab_size, 1);
    st.rows.resize(work.rows.size());
    for (size_t i = 0; i < work.rows.size(); ++i) {
      const SampleRow& r = work.rows[i];
      SamplerRow& row = st.rows[i];
      row.logits = logits.data() + i * vocab;
      row.params = r.sampling.get();
      row.prompt_ids = r.prompt_ids;
      row.generated_ids = r.generated_ids;
      row.seed = r.seed;
      row.sample_index = static_cast<uint32_t>(r.sample_index);
    }
    result.tokens.resize(work.rows.size());
    st.sampler->sample(st.rows, result.tokens);
  } catch (const std::exception& e) {
    return make_actor_error(static_cast<int>(ErrorCode::internal), std::string("sampling failed: ") + e.what());
  }
  result.sample_s = now_s() - start;
  return result;
}

}  // namespace

sampler_actor spawn_sampler(caf::actor_system& system, PipelineContext context) {
  // Detached: sampling a large batch takes milliseconds; keep it off the pool.
  return system.spawn<caf::detached>([=](SamplerPointer self) -> sampler_actor::behavior_type {
    self->state.context = context;
    return {
        [self](sample_atom, StepWork& work, std::vector<float>& logits) -> caf::result<StepResult> {
          return sample(self, work, logits);
        },
    };
  });
}

}  // namespace llmk
