// The sampler actor: samples one token per logits row where the logits are,
// with the DeviceSampler of the view's device (core/device_sampler.hpp: the
// CPU's runs the Sampler of core/sampler.hpp over host rows; a device's
// samples in device memory and copies back only ids and logprobs). Its answer goes to the scheduler (the
// executor delegated the scheduler's request to it). One thread: a second
// OpenMP team next to the executor's would spin against it between steps
// (measured on 2 cores: 8000 tok/s with one team, under 1000 with two).
//
// It keeps every live request's sampling state, updated by the deltas of
// each SampleWork (actors/messages.hpp): released requests are dropped,
// opened ones added, and each sampled id is appended to its sample's
// history, which the penalties and the draw's counter read. A speculative
// step's rows of one sample (SampleRow::draft_token) extend its history
// only up to the first row whose id rejects the next row's draft, as the
// scheduler's update keeps only those ids (core/speculation.hpp). A token
// tree's rows (SampleRow::tree_parent) each sit one id past their parent's
// history, and the history moves on along the path the ids choose.
//
// Structured outputs (core/grammar.hpp): a request with a grammar has one
// GrammarMatcher per sample, and each sample's mask for its next row. Once a
// step is sampled (its ids published, so the executor already runs the next
// forward under scheduler.overlap) and its logits released, each matcher
// accepts its sample's new id and fills the next mask: that work overlaps
// the next forward, and the next step's rows find their masks ready.
// A structured sample that speculates (a chain of drafts; structured
// requests draft no trees) has a mask per verification row: the matcher
// walks the drafts, filling each row's mask, and rolls back before the ids
// are known. A draft the grammar refuses ends the walk: the row before it
// is masked, so its id cannot be that draft, and the rows after it are off
// the path.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <span>
#include <unordered_map>

#include "actors/pipeline.hpp"
#include "core/device_sampler.hpp"
#include "core/error.hpp"
#include "core/grammar.hpp"

namespace llmk {

namespace {

// One request's sampling state.
struct RequestSampling {
  std::shared_ptr<const SamplingParams> params;
  uint64_t seed = 0;
  std::vector<int32_t> prompt_ids;               // only when the repetition penalty is on
  std::vector<std::vector<int32_t>> generated;   // [n] each sample's ids so far
  // Structured outputs: [n] when params->structured, else empty.
  struct SampleGrammar {
    GrammarMatcher matcher;
    std::vector<uint32_t> mask;  // [bitmask_words(vocab)] the next row's allowed tokens
    bool restricts = false;      // the mask allows fewer than every token
    bool stale = true;           // the matcher moved since the mask was filled
  };
  std::vector<SampleGrammar> grammars;
};

// Fills a sample's mask for its next row when the matcher moved.
void refresh_mask(RequestSampling::SampleGrammar& g) {
  if (!g.stale) return;
  g.restricts = g.matcher.fill_next_mask(g.mask);
  g.stale = false;
}

struct SamplerState {
  SamplerState() {}  // user-declared: CAF's stateful_pointer needs it under C++20
  // The view's device's sampler, made for the first view; from then on it
  // is told every open and release, and keeps its own copy of the state
  // (on a device: in device memory).
  std::unique_ptr<DeviceSampler> sampler;
  Device sampler_device = Device::cpu;
  std::vector<DeviceSampler::Row> sampler_rows;
  std::unordered_map<uint64_t, RequestSampling> requests;  // by request key
  PipelineContext context;
  // Per row of the current step: its request and its sample's history. Reused across steps.
  std::vector<RequestSampling*> row_requests;
  std::vector<std::vector<int32_t>*> row_histories;
  std::vector<int32_t> row_offsets;  // a speculative row's place after its sample's first row of the step; else 0
  std::vector<bool> on_path;         // rows whose ids the sample's history takes
  // Samples whose matcher accepted an id this step: (request key, sample).
  std::vector<std::pair<uint64_t, int32_t>> moved_grammars;
  // The masks of structured samples' verification rows (the first row of a
  // sample uses its SampleGrammar::mask). Reused across steps.
  std::vector<std::vector<uint32_t>> draft_masks;
  uint64_t last_sampled_step = 0;
  // Histories of rows whose sequence a failed step ended (see SampleWork::fed_from).
  std::vector<std::vector<int32_t>> orphan_histories;
  static inline const char* name = "sampler";
};

using SamplerPointer = sampler_actor::stateful_pointer<SamplerState>;

caf::error internal_error(const std::string& what) {
  return make_actor_error(static_cast<int>(ErrorCode::internal), "sampler: " + what);
}

// Applies the step's deltas: releases first (a key is never reused, but a
// step may release one request and open another).
caf::error apply_deltas(SamplerState& st, SampleWork& work) {
  for (uint64_t key : work.released) {
    st.requests.erase(key);
    if (st.sampler) st.sampler->release(key);
  }
  for (SamplerOpen& open : work.opened) {
    if (!open.sampling || open.num_samples < 1) return internal_error("a request opened without parameters");
    RequestSampling state;
    state.seed = open.sampling->seed.value_or(0);
    state.params = std::move(open.sampling);
    state.prompt_ids = std::move(open.prompt_ids);
    state.generated.resize(static_cast<size_t>(open.num_samples));
    state.generated[0] = std::move(open.generated_ids);
    if (const auto& structured = state.params->structured) {
      if (!structured->compiled) return internal_error("a structured request without a compiled grammar");
      for (int32_t k = 0; k < open.num_samples; ++k) {
        GrammarMatcher matcher(structured->compiled);
        const auto words = static_cast<size_t>(bitmask_words(matcher.vocab_size()));
        state.grammars.push_back({std::move(matcher), std::vector<uint32_t>(words), false, true});
      }
      for (int32_t id : state.generated[0]) state.grammars[0].matcher.accept(id);
      for (auto& g : state.grammars) refresh_mask(g);
    }
    if (st.sampler) {
      st.sampler->open(open.request_key, *state.params, state.seed, state.prompt_ids, open.num_samples);
      if (!state.generated[0].empty()) st.sampler->seed_history(open.request_key, 0, state.generated[0]);
    }
    if (!st.requests.emplace(open.request_key, std::move(state)).second)
      return internal_error("request " + std::to_string(open.request_key) + " opened twice");
  }
  return caf::none;
}

// Finds each row's request and sample history, and checks that the history
// has as many ids as the scheduler's sample.
caf::error resolve_rows(SamplerState& st, const SampleWork& work) {
  st.row_requests.resize(work.rows.size());
  st.row_histories.assign(work.rows.size(), nullptr);
  st.row_offsets.assign(work.rows.size(), 0);
  st.orphan_histories.clear();
  for (size_t i = 0; i < work.rows.size(); ++i) {
    const SampleRow& r = work.rows[i];
    const int32_t parent = r.tree_parent;
    if (parent >= static_cast<int32_t>(i)) return internal_error("row " + std::to_string(i) + "'s tree parent is " +
                                                                 std::to_string(parent) + ", not a row before it");
    const int32_t offset = parent >= 0 ? st.row_offsets[static_cast<size_t>(parent)] + 1
                           : i > 0 && work.rows[i - 1].draft_token >= 0 ? st.row_offsets[i - 1] + 1
                                                                        : 0;
    st.row_offsets[i] = offset;
    auto it = st.requests.find(r.request_key);
    if (it == st.requests.end()) return internal_error("no state for request " + std::to_string(r.request_key));
    RequestSampling& req = it->second;
    if (r.sample_index < 0 || static_cast<size_t>(r.sample_index) >= req.generated.size())
      return internal_error("sample " + std::to_string(r.sample_index) + " of a request with " +
                            std::to_string(req.generated.size()));
    std::vector<int32_t>& generated = req.generated[static_cast<size_t>(r.sample_index)];  // its history
    const bool feeder_failed = work.fed_from != 0 && work.fed_from != st.last_sampled_step;
    if (feeder_failed && offset == 0 && generated.size() + 1 == static_cast<size_t>(r.num_generated)) {
      // The step that was to give this row its token failed, and with it the
      // sequence: sample into a scratch history, never into the request's.
      st.orphan_histories.emplace_back(generated);
      st.orphan_histories.back().push_back(0);
      st.row_requests[i] = &req;
      st.row_histories[i] = nullptr;  // set below, once the scratch vector stops moving
      continue;
    }
    if (generated.size() + static_cast<size_t>(offset) != static_cast<size_t>(r.num_generated))
      return internal_error("sample " + std::to_string(r.sample_index) + " of request " +
                            std::to_string(r.request_key) + " has " + std::to_string(generated.size()) +
                            " ids here but " + std::to_string(r.num_generated) + " in the scheduler");
    st.row_requests[i] = &req;
    st.row_histories[i] = &generated;
  }
  size_t orphan = 0;
  for (auto& history : st.row_histories)
    if (history == nullptr) history = &st.orphan_histories[orphan++];
  return caf::none;
}

// Samples the rows with the sampler of the view's device, made at the first
// view and from then on told every open and release. The step's ids are
// published to the executor as soon as the sampler has them enqueued, unless
// the executor published them already (its own argmax).
caf::error sample_rows(SamplerState& st, const SampleWork& work, const LogitsView& view, StepResult& result,
                       bool& published) {
  if (!st.sampler) {
    st.sampler = make_device_sampler(view.device, view.vocab_size);
    st.sampler_device = view.device;
    for (const auto& [key, req] : st.requests) {
      st.sampler->open(key, *req.params, req.seed, req.prompt_ids, static_cast<int32_t>(req.generated.size()));
      for (size_t k = 0; k < req.generated.size(); ++k)
        if (!req.generated[k].empty()) st.sampler->seed_history(key, static_cast<int32_t>(k), req.generated[k]);
    }
  } else if (st.sampler_device != view.device) {
    return internal_error(std::string("views of two devices ('") + device_name(st.sampler_device) + "', '" +
                          device_name(view.device) + "')");
  }
  st.sampler_rows.resize(work.rows.size());
  // Structured samples walking their drafts: the matcher walking now and
  // whether its walk goes on; every draft a matcher took is rolled back
  // before this returns, also when it throws.
  struct DraftWalk {
    GrammarMatcher* matcher = nullptr;
    bool open = false;
  } walk;
  struct Rollbacks {
    std::vector<GrammarMatcher*> taken;  // one entry per accepted draft
    ~Rollbacks() {
      for (GrammarMatcher* m : taken) {
        try {
          m->rollback(1);
        } catch (const std::exception& e) {
          spdlog::error("sampler: rolling a grammar back past a draft: {}", e.what());
        }
      }
    }
  } rollbacks;
  size_t next_draft_mask = 0;
  for (size_t i = 0; i < work.rows.size(); ++i) {
    st.sampler_rows[i] = {work.rows[i].request_key, work.rows[i].sample_index,
                          static_cast<int32_t>(st.row_histories[i]->size()) + st.row_offsets[i],
                          work.rows[i].draft_token,
                          work.rows[i].draft_probs ? std::span<const TokenProb>(*work.rows[i].draft_probs)
                                                   : std::span<const TokenProb>{}};
    RequestSampling* req = st.row_requests[i];
    if (req->grammars.empty()) continue;
    const auto sample = static_cast<size_t>(work.rows[i].sample_index);
    if (st.row_histories[i] != &req->generated[sample]) continue;  // an orphan row: its id is dropped
    if (work.rows[i].tree_parent >= 0)
      return internal_error("request " + std::to_string(work.rows[i].request_key) +
                            " has a grammar and a token tree's row (structured requests draft chains only)");
    auto& g = req->grammars[sample];
    if (st.row_offsets[i] == 0) {
      walk = {&g.matcher, true};
      refresh_mask(g);
      if (g.restricts) st.sampler_rows[i].token_bitmask = g.mask;
      continue;
    }
    // Row i follows the draft row i - 1 verifies: the mask after it.
    if (!walk.open || walk.matcher != &g.matcher || !g.matcher.accept(work.rows[i - 1].draft_token)) {
      walk.open = false;  // off the path whatever its id: sampled unmasked, dropped after
      continue;
    }
    rollbacks.taken.push_back(&g.matcher);
    if (next_draft_mask == st.draft_masks.size()) st.draft_masks.emplace_back(g.mask.size());
    std::vector<uint32_t>& mask = st.draft_masks[next_draft_mask];
    mask.resize(g.mask.size());
    if (g.matcher.fill_next_mask(mask)) {
      st.sampler_rows[i].token_bitmask = mask;
      ++next_draft_mask;
    }
  }

  result.tokens.resize(work.rows.size());
  st.sampler->sample(view, st.sampler_rows, result.tokens, [&](const SampledIds& ids) {
    if (published) return;
    st.context.feedback->publish(work.step, ids);
    published = true;
  });
  return caf::none;
}

caf::result<StepResult> sample(SamplerPointer self, SampleWork& work, const LogitsView& view) {
  auto& st = self->state;
  if (st.context.tracer) st.context.tracer->observe("sampler", "sample", {}, work.step);
  ScopedSpan span(st.context.tracer.get(), "sample", "sampler", work.step, static_cast<int64_t>(work.rows.size()));
  double start = now_s();
  StepResult result;
  result.step = work.step;
  result.forward_s = work.forward_s;
  result.hidden = std::move(work.hidden);
  // The step's ids, for the executor's next step: published already when
  // the executor picked them (every row the raw argmax).
  bool published = !work.published_ids.empty();
  auto run = [&]() -> caf::error {
    try {
      if (auto err = apply_deltas(st, work)) return err;
      if (static_cast<size_t>(view.num_rows) != work.rows.size() || view.row_stride < view.vocab_size)
        return internal_error(std::to_string(view.num_rows) + " logits rows for " +
                              std::to_string(work.rows.size()) + " sample rows");
      if (auto err = resolve_rows(st, work)) return err;
      if (auto err = sample_rows(st, work, view, result, published)) return err;
      if (!work.published_ids.empty()) {
        // The next step already runs on the executor's ids: they must be these.
        if (work.published_ids.size() != result.tokens.size())
          return internal_error("the executor published " + std::to_string(work.published_ids.size()) +
                                " ids for a step of " + std::to_string(result.tokens.size()) + " rows");
        for (size_t i = 0; i < result.tokens.size(); ++i)
          if (work.published_ids[i] != result.tokens[i].token_id)
            return internal_error("step " + std::to_string(work.step) + " row " + std::to_string(i) +
                                  ": the executor's argmax picked token " + std::to_string(work.published_ids[i]) +
                                  ", the sampler " + std::to_string(result.tokens[i].token_id));
      }
      // The ids the scheduler will append: the histories move on by one each,
      // a speculative sample's up to its first rejected draft.
      bool rejected = false;
      st.on_path.assign(work.rows.size(), false);
      for (size_t i = 0; i < work.rows.size(); ++i) {
        const SampleRow& r = work.rows[i];
        if (r.tree_parent >= 0) {  // a tree's node: counts on the path its parent's id chooses
          const auto parent = static_cast<size_t>(r.tree_parent);
          if (!st.on_path[parent] || result.tokens[parent].token_id != r.tree_token) continue;
          st.on_path[i] = true;
          st.row_histories[i]->push_back(result.tokens[i].token_id);
          continue;
        }
        if (st.row_offsets[i] == 0) rejected = false;
        if (rejected) continue;
        st.on_path[i] = true;
        const int32_t id = result.tokens[i].token_id;
        st.row_histories[i]->push_back(id);
        RequestSampling* req = st.row_requests[i];
        if (!req->grammars.empty() && st.row_histories[i] == &req->generated[static_cast<size_t>(r.sample_index)]) {
          auto& g = req->grammars[static_cast<size_t>(r.sample_index)];
          if (!g.matcher.accept(id))
            spdlog::debug("sampler: request {} sample {}: the grammar does not take token {}", r.request_key,
                          r.sample_index, id);
          g.stale = true;
          st.moved_grammars.emplace_back(r.request_key, r.sample_index);
        }
        if (r.draft_token >= 0 && id != r.draft_token) {
          rejected = true;  // the device's sampler kept every row's id: drop the rejected ones
          st.sampler->truncate_history(r.request_key, r.sample_index,
                                       static_cast<int32_t>(st.row_histories[i]->size()));
        }
      }
      // A tree's sample: the device's sampler kept ids of rows off the path;
      // it takes the step's ids from the tree's root row on again.
      for (size_t i = 0; i < work.rows.size(); ++i) {
        const bool root = work.rows[i].tree_parent < 0 && i + 1 < work.rows.size() &&
                          std::any_of(work.rows.begin() + static_cast<std::ptrdiff_t>(i) + 1, work.rows.end(),
                                      [i](const SampleRow& r) { return r.tree_parent == static_cast<int32_t>(i); });
        if (!root) continue;
        const SampleRow& r = work.rows[i];
        const std::vector<int32_t>& history = *st.row_histories[i];
        const auto before = static_cast<size_t>(st.sampler_rows[i].num_generated);
        st.sampler->truncate_history(r.request_key, r.sample_index, static_cast<int32_t>(before));
        st.sampler->seed_history(r.request_key, r.sample_index,
                                 std::span<const int32_t>(history.data() + before, history.size() - before));
      }
    } catch (const std::exception& e) {
      return internal_error(std::string("sampling failed: ") + e.what());
    }
    return caf::none;
  };
  st.moved_grammars.clear();
  caf::error err = run();
  st.context.feedback->sampled(work.step);  // the view is not read after this
  // The next masks, while the executor runs the next forward.
  for (const auto& [key, sample] : st.moved_grammars) {
    auto it = st.requests.find(key);
    if (it == st.requests.end()) continue;
    try {
      refresh_mask(it->second.grammars[static_cast<size_t>(sample)]);
    } catch (const std::exception& e) {  // tried again before the row is sampled, where it fails the step
      spdlog::warn("sampler: request {} sample {}: the next token mask: {}", key, sample, e.what());
    }
  }
  if (err) {
    if (!published) st.context.feedback->fail(work.step);
    return err;
  }
  st.last_sampled_step = work.step;
  result.sample_s = now_s() - start;
  return result;
}

}  // namespace

sampler_actor spawn_sampler(caf::actor_system& system, PipelineContext context) {
  // Detached: sampling a large batch takes milliseconds; keep it off the pool.
  // State travels as spawn arguments (CAF 0.17 dereferences a null argument
  // tuple when an actor is spawned without any).
  return system.spawn<caf::detached>(
      [](SamplerPointer self, PipelineContext context) -> sampler_actor::behavior_type {
    self->state.context = context;
    return {
        [self](sample_atom, SampleWork& work, const LogitsView& view) -> caf::result<StepResult> {
          return sample(self, work, view);
        },
    };
  }, std::move(context));
}

}  // namespace llmk
