#include "core/engine_parts.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/draft_proposer.hpp"
#include "core/error.hpp"
#include "core/medusa_proposer.hpp"
#include "core/plugin_proposer.hpp"
#include "core/speculation.hpp"

namespace llmk {

namespace {

double mib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

EngineParts build_engine_parts(const EngineConfig& config, std::shared_ptr<const Checkpoint> checkpoint,
                               PluginRegistry& plugins, std::shared_ptr<KvEventLog> kv_events) {
  EngineParts parts;
  const ModelConfig& mc = checkpoint->config();
  parts.executor = make_executor(config, checkpoint, plugins);
  const ModelRuntime& runtime = parts.executor->runtime();

  auto scheduling = std::make_shared<SchedulerParts>();
  llmk_kv_allocator_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.num_slots = runtime.num_kv_slots;
  desc.block_size = config.kv_cache.block_size;
  desc.max_seq_len = runtime.max_seq_len;
  desc.enable_prefix_caching = config.kv_cache.enable_prefix_caching ? 1 : 0;
  desc.options = config.plugins.kv_allocator_options.c_str();
  if (kv_events) {
    desc.event_sink = &KvEventLog::sink;
    desc.event_sink_ctx = kv_events.get();
    scheduling->kv_events = kv_events;
  }
  auto kv = std::make_unique<KvAllocatorImpl>(plugins.load(config.plugins.kv_allocator, LLMK_PLUGIN_KV_ALLOCATOR),
                                              desc);
  if (kv_events && (!config.kv_cache.enable_prefix_caching || !kv->cached_blocks())) {
    spdlog::warn("kv_events: {} {}: no block events will be published", config.plugins.kv_allocator,
                 config.kv_cache.enable_prefix_caching ? "has no prefix cache" : "runs without prefix caching");
  }
  scheduling->kv = std::move(kv);
  SchedulerOptions options;
  if (config.scheduler.preemption == "offload") {
    // Called inside schedule(), which runs only when no step is in flight.
    scheduling->offloader = parts.executor;
    options.offloader = scheduling->offloader.get();
  }
  // Handoffs save and restore between steps (a pipeline is refused by the
  // config); a prefill replica saves as its sequences end, so it plans no
  // step ahead.
  options.kv_io = parts.executor.get();
  options.kv_layout = kv_handoff_layout(config, mc, runtime.kv_dtype);
  const DisaggregationSection& pd = config.disaggregation;
  if (pd.mode == "prefill") {
    const auto ttl = std::chrono::milliseconds(static_cast<int64_t>(pd.timeout_s * 1000.0));
    scheduling->handoffs = std::make_shared<KvHandoffBox>(options.kv_layout, pd.max_pending, ttl);
    options.handoffs = scheduling->handoffs.get();
  }
  // A pipeline keeps a step per stage in flight; the scheduler plans them
  // disjoint, so nothing is planned ahead with fed-back ids.
  const int32_t stages = parts.executor->max_steps_in_flight();
  const auto chosen = static_cast<int32_t>(config.parallel.steps_in_flight);
  options.max_steps_in_flight = chosen > 0 ? std::min(chosen, stages) : stages;
  options.speculative = config.speculative;
  options.token_trees = parts.executor->attends_token_trees();
  if (config.speculative.tree_width > 1 && !options.token_trees)
    spdlog::warn("speculative.tree_width {}: plugin {} reads no token trees (attention API 3.3): drafts are "
                 "verified as chains",
                 config.speculative.tree_width, config.plugins.attention);
  options.stream = StreamWindow{static_cast<int32_t>(config.kv_cache.window),
                                static_cast<int32_t>(config.kv_cache.sink_tokens),
                                static_cast<int32_t>(config.kv_cache.block_size)};
  // A draft model's cache holds as many tokens as the target's.
  if (config.speculative.method == "draft")
    options.proposer = make_draft_proposer(config, *checkpoint, runtime.num_kv_slots, plugins);
  else if (config.speculative.method == "medusa") {
    if (!parts.executor->keeps_hidden_rows())
      throw Error(ErrorCode::invalid_config, "speculative.method: 'medusa' reads the target's hidden states, which "
                                             "this executor (" + parts.executor->describe() + ") does not hand back");
    auto medusa = make_medusa_proposer(config.speculative, mc);
    spdlog::info("speculative: {} Medusa heads of {} layers ({:.1f} MiB) from {}", medusa->heads().num_heads(),
                 medusa->heads().num_layers(), mib(medusa->heads().bytes()), config.speculative.medusa_heads);
    options.proposer = std::move(medusa);
  } else {  // a proposer plugin from the engine's search path (plugins.search_path too)
    options.proposer = make_proposer(config.speculative, &plugins, static_cast<uint32_t>(mc.vocab_size));
  }
  if (const auto* p = dynamic_cast<const PluginProposer*>(options.proposer.get()))
    spdlog::info("speculative: proposer {} {} ({})", p->info().name, p->info().version, p->info().file.string());
  const SchedulerLimits limits{static_cast<int32_t>(runtime.max_seq_len), mc.eos_token_ids, mc.vocab_size};
  scheduling->scheduler = std::make_unique<Scheduler>(config.scheduler, limits, *scheduling->kv, options);
  scheduling->overlap = config.scheduler.overlap && stages == 1 && !scheduling->handoffs;
  scheduling->pipelined = stages > 1;
  parts.scheduling = std::move(scheduling);

  spdlog::info("engine: {} layers, vocab {}, context {}, executor {}", mc.num_layers, mc.vocab_size,
               runtime.max_seq_len, parts.executor->describe());
  spdlog::info("engine: KV cache {} (kv {} ({}), {} MiB, blocks of {}) holds {} tokens = {} maximum-length "
               "sequences; weights {:.1f} MiB",
               config.plugins.kv_allocator, dtype_name(runtime.kv_dtype), runtime.kv_dtype_reason,
               static_cast<int64_t>(mib(parts.executor->kv_cache_bytes())), parts.scheduling->kv->block_size(),
               runtime.num_kv_slots, runtime.num_kv_slots / std::max<uint32_t>(1, runtime.max_seq_len),
               mib(parts.executor->weight_bytes()));
  return parts;
}

std::string kv_handoff_layout(const EngineConfig& config, const ModelConfig& model, DType kv_dtype) {
  return "layers=" + std::to_string(model.num_layers) + " kv_heads=" + std::to_string(model.num_kv_heads) +
         " head_dim=" + std::to_string(model.head_dim) + " kv=" + dtype_name(kv_dtype) +
         (kv_dtype == DType::i8 ? "/g" + std::to_string(config.kv_cache.group_size) : std::string()) +
         " block=" + std::to_string(config.kv_cache.block_size) + " tensor=" + std::to_string(config.parallel.tensor);
}

}  // namespace llmk
