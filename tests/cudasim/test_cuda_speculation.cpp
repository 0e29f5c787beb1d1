// Speculative decoding on the simulated CUDA executor: stories260K driven by
// the Scheduler with prompt lookup or a draft model (a second CUDA executor
// on the same device, its weights through linear.cuda_int4), sampled by the
// CUDA sampler with its verification rows, rolled back through kv.paged and
// kv.contiguous, the target with linear.cublas and the quantized
// linear.cuda_int8. The harness plays the engine's actors (executor, sampler
// with its history truncation, scheduler update, steps planned ahead with
// fed-back ids). Against plain decoding on the same executor (the same
// greedy tokens, and the same seeded samples of a request that does not
// speculate), and against the CPU executor running the same speculation
// (the same tokens, and the same draft and acceptance counts). Token trees
// from prompt lookup (attention.cuda reads them, API 3.3) likewise, under
// kv.paged, kv.contiguous and kv.vm (the accepted path's K/V moved by the
// next step's kv_copies).
#include "test_support.hpp"

#if !defined(LLMK_CUDASIM_PLUGIN_DIR)
#include "support/skip.hpp"
TEST_CASE("speculation on the simulated CUDA executor needs the simulated plugins", "[cuda_executor][speculation]") {
  LLMK_SKIP("this build has no simulated CUDA plugins (tests/cudasim_plugins)");
}
#else
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint.hpp"
#include "core/config.hpp"
#include "core/cpu_sampler.hpp"
#include "core/cuda/cuda_executor.hpp"
#include "core/cuda/cuda_sampler.hpp"
#include "core/device_registry.hpp"
#include "core/draft_proposer.hpp"
#include "core/executor.hpp"
#include "core/plugin_loader.hpp"
#include "core/scheduler.hpp"
#include "core/speculation.hpp"
#include "support/golden.hpp"

namespace {

using namespace llmk;

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
  int32_t arrives_at_step = 0;
};

struct Run {
  std::map<std::string, std::vector<int32_t>> tokens;  // by request id (one sample each)
  SchedulerStats stats;
  int32_t num_verification_steps = 0;  // steps holding a decode with drafts beside another sequence's rows
  int32_t num_planned_ahead = 0;       // steps run with fed-back ids
  int32_t num_tree_steps = 0;          // steps holding a token tree other than a chain
  int32_t num_kv_copies = 0;           // KV copies the steps applied (a tree's accepted path moved)
};

// The jobs through `executor` and `sampler`, as the engine's actors run
// them: each step executed, its rows sampled (a verification row with its
// draft), each sample's history cut after its first rejected draft, the
// next step planned ahead when the scheduler allows (overlap) and run on
// the sampler's ids.
Run run_jobs(Executor& executor, DeviceSampler& sampler, const EngineConfig& cfg, PluginRegistry& plugins,
             const std::vector<Job>& jobs, std::shared_ptr<Proposer> proposer, bool overlap) {
  const ModelRuntime& rt = executor.runtime();
  const int32_t vocab = executor.model_config().vocab_size;
  const llmk_kv_allocator_desc desc{sizeof(llmk_kv_allocator_desc), rt.num_kv_slots, cfg.kv_cache.block_size,
                                    rt.max_seq_len, 0, "{}", nullptr, nullptr};
  KvAllocatorImpl kv(plugins.load(cfg.plugins.kv_allocator, LLMK_PLUGIN_KV_ALLOCATOR), desc);
  SchedulerOptions options;
  options.speculative = cfg.speculative;
  options.proposer = std::move(proposer);
  options.token_trees = executor.attends_token_trees();
  Scheduler sched(cfg.scheduler, SchedulerLimits{int32_t(rt.max_seq_len), {}, vocab}, kv, options);

  Run run;
  std::map<uint64_t, bool> opened;
  size_t next_job = 0;
  int32_t step = 0;
  StepPlan plan;
  SampledIds previous;  // the sampler's ids of the step before `plan`, for its fed-back rows
  std::vector<SampledToken> out;
  while (true) {
    if (plan.empty()) {
      while (next_job < jobs.size() && jobs[next_job].arrives_at_step <= step) {
        sched.add_request(jobs[next_job].id, jobs[next_job].prompt, jobs[next_job].params);
        ++next_job;
      }
      if (!sched.has_work()) {
        if (next_job == jobs.size()) break;
        ++step;
        continue;
      }
      plan = sched.schedule();
      previous = SampledIds{};
      REQUIRE(plan.events.empty());
      if (plan.empty()) continue;
    }
    bool drafts = false;
    for (const ScheduledSeq& s : plan.seqs) drafts = drafts || s.num_draft_tokens > 0;
    if (drafts && plan.seqs.size() > 1) ++run.num_verification_steps;
    if (!plan.batch.fed_back.empty()) ++run.num_planned_ahead;
    bool branching = false;  // a node whose parent is not the row before it
    for (int32_t s = 0; s < plan.batch.num_seqs() && !plan.batch.tree_parents.empty(); ++s)
      for (int32_t t = plan.batch.query_start[s]; t < plan.batch.query_start[s + 1]; ++t)
        branching = branching || plan.batch.tree_parents[size_t(t)] != t - plan.batch.query_start[s] - 1;
    run.num_tree_steps += branching;
    run.num_kv_copies += static_cast<int32_t>(plan.batch.kv_copies.size());

    const LogitsView view = executor.execute(plan.batch, previous);
    std::vector<DeviceSampler::Row> rows;
    for (const LogitsTarget& t : plan.logits) {
      if (!opened[t.request_key]) {
        sampler.open(t.request_key, *t.sampling, *t.sampling->seed, {}, 1);
        opened[t.request_key] = true;
      }
      rows.push_back({t.request_key, t.sample_index, t.num_generated, t.draft_token});
    }
    out.resize(rows.size());
    SampledIds enqueued;
    if (!rows.empty()) sampler.sample(view, rows, out, [&](const SampledIds& ids) { enqueued = ids; });
    std::vector<int32_t> ids;
    bool rejected = false;
    for (size_t i = 0; i < rows.size(); ++i) {
      ids.push_back(out[i].token_id);
      if (i == 0 || rows[i - 1].draft_token < 0) rejected = false;  // a sample's first row of the step
      if (rejected) continue;
      if (rows[i].draft_token >= 0 && out[i].token_id != rows[i].draft_token) {
        rejected = true;
        sampler.truncate_history(rows[i].request_key, rows[i].sample_index, rows[i].num_generated + 1);
      }
    }
    // A tree's sample: the sampler kept the ids of rows off the accepted
    // path; as the sampler actor does, it takes the step's ids from the
    // tree's root row on and is given the path's (the emitted tokens).
    std::map<std::string, std::pair<uint64_t, int32_t>> trees;  // request id: key, the root row's num_generated
    for (const LogitsTarget& t : plan.logits)
      if (t.tree_parent >= 0) {
        const LogitsTarget& root = plan.logits[size_t(t.tree_parent)];
        trees.emplace(t.request_id, std::make_pair(t.request_key, root.num_generated));
      }
    std::map<std::string, std::vector<int32_t>> emitted;
    StepPlan ahead = overlap ? sched.schedule_ahead(plan) : StepPlan{};
    for (const TokenEvent& e : sched.update_from_output(plan, ids)) {
      REQUIRE(e.error == "");
      if (e.token_id) run.tokens[e.request_id].push_back(*e.token_id);
      if (e.token_id) emitted[e.request_id].push_back(*e.token_id);
    }
    for (const auto& [id, tree] : trees) {
      sampler.truncate_history(tree.first, 0, tree.second);
      sampler.seed_history(tree.first, 0, emitted[id]);
    }
    plan = std::move(ahead);
    previous = enqueued;
    ++step;
  }
  run.stats = sched.stats();
  CHECK(run.stats.kv.used_slots == 0);
  return run;
}

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// A mixed batch: prefills arrive while others decode (chunked), greedy
// rows with and without penalties (which read the drafts before them),
// and a seeded sampled request that does not speculate.
std::vector<Job> mixed_jobs() {
  const auto& golden = test::golden_cases();
  std::vector<Job> jobs;
  jobs.push_back({"greedy", golden[2].input_ids, greedy(24), 0});  // its greedy text repeats: drafts are accepted
  SamplingParams penalised = greedy(16);
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.8f;  // strong: an id left in the history by a rejected row changes the output
  penalised.presence_penalty = 0.5f;
  jobs.push_back({"penalised", golden[1].input_ids, penalised, 2});
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 17;
  sampled.max_tokens = 12;
  sampled.ignore_eos = true;
  sampled.num_speculative_tokens = 0;
  jobs.push_back({"sampled", golden[0].input_ids, sampled, 3});
  return jobs;
}

EngineConfig base_config() {
  EngineConfig cfg;
  cfg.executor.num_threads = 1;
  cfg.kv_cache.block_size = 8;
  cfg.kv_cache.max_seq_len = 64;
  cfg.kv_cache.capacity_tokens = 256;
  cfg.kv_cache.enable_prefix_caching = false;
  cfg.scheduler.max_num_seqs = 4;
  cfg.scheduler.max_num_batched_tokens = 16;  // prompts take chunks beside the decodes
  return cfg;
}

EngineConfig with_ngram(EngineConfig cfg) {
  cfg.speculative.method = "ngram";
  cfg.speculative.num_tokens = 3;
  cfg.speculative.prompt_lookup_min = 1;
  cfg.speculative.prompt_lookup_max = 3;
  return cfg;
}

EngineConfig cuda_config(EngineConfig cfg, const std::string& linear) {
  cfg.executor.device = "cuda";
  cfg.plugins.linear = linear;
  cfg.plugins.attention = "attention.cuda";
  return cfg;
}

// Trees whose accepted path leaves row order: knowing each job's plain
// greedy tokens, it proposes for a sequence a tree whose first branch is
// wrong (at its first, or after its second token) and whose second branch
// holds the right continuation; every third call the right branch comes
// first. The verified path then runs through later rows of the tree, whose
// K/V the next step moves next to the newest token (kv_copies).
class OracleTreeProposer final : public Proposer {
 public:
  OracleTreeProposer(const std::vector<Job>& jobs, const std::map<std::string, std::vector<int32_t>>& answers,
                     int32_t vocab)
      : jobs_(jobs), answers_(answers), vocab_(vocab) {}

  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& out) override {
    out.assign(requests.size(), {});
    for (size_t i = 0; i < requests.size(); ++i) out[i] = right(requests[i]);
  }

  void propose_trees(std::span<const DraftRequest> requests, std::vector<DraftTree>& out) override {
    out.assign(requests.size(), DraftTree{});
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::vector<int32_t> good = right(requests[i]);
      if (good.empty()) continue;
      if (requests[i].max_nodes == 0) {  // a chain wanted (a request with penalties)
        out[i] = DraftTree::chain(good);
        continue;
      }
      std::vector<int32_t> bad = good;
      const size_t at = calls_ % 2 == 0 || good.size() < 3 ? 0 : 2;  // where the wrong branch departs
      bad[at] = (bad[at] + 1) % vocab_;
      DraftTree& tree = out[i];
      add_branch(tree, calls_ % 3 == 2 ? good : bad);
      add_branch(tree, calls_ % 3 == 2 ? bad : good);
      if (requests[i].max_nodes > 0) tree.keep(std::min(tree.size(), requests[i].max_nodes));
      ++calls_;
    }
  }

 private:
  // The right drafts: the job's next plain tokens, within what the request allows.
  std::vector<int32_t> right(const DraftRequest& r) const {
    for (const Job& j : jobs_) {
      if (r.tokens.size() < j.prompt.size() || !std::equal(j.prompt.begin(), j.prompt.end(), r.tokens.begin()))
        continue;
      const std::vector<int32_t>& answer = answers_.at(j.id);
      const size_t done = r.tokens.size() - j.prompt.size();
      size_t n = std::min<size_t>(static_cast<size_t>(r.max_tokens), answer.size() > done ? answer.size() - done : 0);
      if (r.max_total_tokens > 0)
        n = std::min<size_t>(n, static_cast<size_t>(std::max<int64_t>(0, r.max_total_tokens - int64_t(r.tokens.size()))));
      return {answer.begin() + static_cast<std::ptrdiff_t>(done),
              answer.begin() + static_cast<std::ptrdiff_t>(done + n)};
    }
    return {};
  }

  // Merges a branch into the tree by common prefix.
  static void add_branch(DraftTree& tree, const std::vector<int32_t>& branch) {
    int32_t parent = -1;
    for (const int32_t token : branch) {
      int32_t found = -1;
      for (int32_t j = 0; j < tree.size() && found < 0; ++j)
        if (tree.parents[size_t(j)] == parent && tree.tokens[size_t(j)] == token) found = j;
      if (found < 0) {
        tree.tokens.push_back(token);
        tree.parents.push_back(parent);
        found = tree.size() - 1;
      }
      parent = found;
    }
  }

  std::vector<Job> jobs_;
  std::map<std::string, std::vector<int32_t>> answers_;
  int32_t vocab_;
  int64_t calls_ = 0;
};

}  // namespace

TEST_CASE("speculation on the simulated CUDA executor: prompt lookup and a CUDA draft model give plain decoding's "
          "tokens alone and in a mixed batch, and the CPU executor's counts",
          "[cuda_executor][speculation]") {
  // Each allocator and each linear plugin once (paired to keep the simulation's time down).
  const auto [allocator, linear] = GENERATE(table<std::string, std::string>(
      {{"kv.paged", "linear.cublas"}, {"kv.contiguous", "linear.cuda_int8"}}));
  INFO(allocator << ", " << linear);
  cudasim_test::reset_simulator(1);
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  EngineConfig cfg = base_config();
  cfg.plugins.kv_allocator = allocator;
  PluginRegistry plugins({LLMK_CUDASIM_PLUGIN_DIR});  // then the build's (KV allocators, CPU plugins)
  const EngineConfig cuda_cfg = cuda_config(cfg, linear);
  const std::unique_ptr<Executor> gpu = make_cuda_executor(cuda_cfg, checkpoint, plugins);
  const int32_t vocab = checkpoint->config().vocab_size;
  const std::vector<Job> alone{{"alone", test::golden_cases()[3].input_ids, greedy(24), 0}};
  const std::vector<Job> mixed = mixed_jobs();

  auto cuda_run = [&](const EngineConfig& c, const std::vector<Job>& jobs, std::shared_ptr<Proposer> proposer,
                      bool overlap) {
    const std::unique_ptr<DeviceSampler> sampler = make_cuda_sampler(vocab);
    return run_jobs(*gpu, *sampler, c, plugins, jobs, std::move(proposer), overlap);
  };
  for (const bool in_batch : {false, true}) {
    const std::vector<Job>& jobs = in_batch ? mixed : alone;
    INFO((in_batch ? "in a mixed batch" : "alone"));
    const Run plain = cuda_run(cuda_cfg, jobs, nullptr, true);

    // Prompt lookup, steps planned ahead whenever the scheduler allows.
    const EngineConfig ngram_cfg = with_ngram(cuda_cfg);
    const Run ngram = cuda_run(ngram_cfg, jobs, make_proposer(ngram_cfg.speculative), true);
    CHECK(ngram.tokens == plain.tokens);
    CHECK(ngram.stats.num_spec_drafts > 0);
    CHECK(ngram.stats.num_spec_accepted_tokens > 0);
    CHECK(ngram.stats.num_spec_accepted_tokens < ngram.stats.num_spec_draft_tokens);  // some rows rolled back
    if (in_batch) CHECK(ngram.num_verification_steps > 0);
    // With a proposer no step is planned ahead (docs/speculative.md), while
    // plain decoding in the same harness runs on fed-back ids.
    CHECK(plain.num_planned_ahead > 0);
    CHECK(ngram.num_planned_ahead == 0);

    // A draft model on the same device: stories260K through the 4-bit
    // linear.cuda_int4 (its drafts disagree with the target now and then).
    EngineConfig draft_cfg = cuda_cfg;
    draft_cfg.speculative.method = "draft";
    draft_cfg.speculative.num_tokens = 3;
    draft_cfg.speculative.draft_model = test::stories_dir();
    draft_cfg.speculative.draft_linear = "linear.cuda_int4";
    // make_draft_proposer builds the draft's executor through the device registry.
    register_device_backend(Device::cuda, DeviceBackend{make_cuda_executor, make_cuda_sampler, nullptr});
    std::shared_ptr<DraftModelProposer> draft =
        make_draft_proposer(draft_cfg, *checkpoint, gpu->runtime().num_kv_slots, plugins);
    REQUIRE(draft->kv().can_truncate());
    const Run drafted = cuda_run(draft_cfg, jobs, draft, false);
    CHECK(drafted.tokens == plain.tokens);
    CHECK(drafted.stats.num_spec_drafts > 0);
    CHECK(drafted.stats.num_spec_accepted_tokens > 0);
    CHECK(drafted.stats.num_spec_accepted_tokens < drafted.stats.num_spec_draft_tokens);
    CHECK(draft->num_steps() > 0);

    // The CPU executor running the same speculation: the same tokens and
    // counts (F32 weights on both; the CPU has no twin of the int8 kernels).
    if (linear != "linear.cublas") continue;
    const std::unique_ptr<Executor> cpu = make_executor(with_ngram(cfg), checkpoint, plugins);
    const std::unique_ptr<DeviceSampler> cpu_sampler = make_cpu_sampler(vocab);
    const Run on_cpu = run_jobs(*cpu, *cpu_sampler, with_ngram(cfg), plugins, jobs,
                                make_proposer(ngram_cfg.speculative), true);
    CHECK(on_cpu.tokens == ngram.tokens);
    CHECK(on_cpu.stats.num_spec_drafts == ngram.stats.num_spec_drafts);
    CHECK(on_cpu.stats.num_spec_draft_tokens == ngram.stats.num_spec_draft_tokens);
    CHECK(on_cpu.stats.num_spec_accepted_tokens == ngram.stats.num_spec_accepted_tokens);
  }
}

// Prompt lookup trees (and the CPU executor running them), and trees whose
// accepted path is moved under kv.paged, kv.contiguous and kv.vm.
TEST_CASE("token trees on the simulated CUDA executor give plain decoding's tokens alone and in a mixed batch",
          "[cuda_executor][speculation][tree]") {
  cudasim_test::reset_simulator(1);
  std::shared_ptr<const Checkpoint> checkpoint = load_checkpoint(test::stories_dir());
  PluginRegistry plugins({LLMK_CUDASIM_PLUGIN_DIR});  // then the build's (KV allocators, CPU plugins)
  const EngineConfig cuda_cfg = cuda_config(base_config(), "linear.cublas");
  const std::unique_ptr<Executor> gpu = make_cuda_executor(cuda_cfg, checkpoint, plugins);
  REQUIRE(gpu->attends_token_trees());  // attention.cuda reads trees (API 3.3)
  const int32_t vocab = checkpoint->config().vocab_size;
  auto trees = [](EngineConfig cfg, const std::string& allocator) {
    cfg = with_ngram(cfg);
    cfg.speculative.num_tokens = 4;
    cfg.speculative.tree_width = 3;
    cfg.speculative.tree_nodes = 12;
    cfg.plugins.kv_allocator = allocator;
    return cfg;
  };
  const std::vector<Job> alone{{"alone", test::golden_cases()[3].input_ids, greedy(24), 0}};
  const std::vector<Job> mixed = mixed_jobs();
  int32_t ngram_tree_steps = 0;
  for (const bool in_batch : {false, true}) {
    const std::vector<Job>& jobs = in_batch ? mixed : alone;
    INFO((in_batch ? "in a mixed batch" : "alone"));
    const std::unique_ptr<DeviceSampler> plain_sampler = make_cuda_sampler(vocab);
    const Run plain = run_jobs(*gpu, *plain_sampler, cuda_cfg, plugins, jobs, nullptr, true);

    // Prompt lookup trees, and the CPU executor running the same trees.
    const EngineConfig ngram_cfg = trees(cuda_cfg, "kv.paged");
    const std::unique_ptr<DeviceSampler> sampler = make_cuda_sampler(vocab);
    const Run ngram = run_jobs(*gpu, *sampler, ngram_cfg, plugins, jobs, make_proposer(ngram_cfg.speculative), true);
    CHECK(ngram.tokens == plain.tokens);
    CHECK(ngram.stats.num_spec_accepted_tokens > 0);
    ngram_tree_steps += ngram.num_tree_steps;
    const EngineConfig cpu_cfg = trees(base_config(), "kv.paged");
    const std::unique_ptr<Executor> cpu = make_executor(cpu_cfg, checkpoint, plugins);
    const std::unique_ptr<DeviceSampler> cpu_sampler = make_cpu_sampler(vocab);
    const Run on_cpu = run_jobs(*cpu, *cpu_sampler, cpu_cfg, plugins, jobs, make_proposer(cpu_cfg.speculative), true);
    CHECK(on_cpu.tokens == ngram.tokens);
    CHECK(on_cpu.num_tree_steps == ngram.num_tree_steps);
    CHECK(on_cpu.stats.num_spec_draft_tokens == ngram.stats.num_spec_draft_tokens);
    CHECK(on_cpu.stats.num_spec_accepted_tokens == ngram.stats.num_spec_accepted_tokens);

    // Trees whose right branch is mostly not the first: the accepted K/V
    // moves, under every allocator.
    for (const char* allocator : {"kv.paged", "kv.contiguous", "kv.vm"}) {
      INFO(allocator);
      const EngineConfig cfg = trees(cuda_cfg, allocator);
      const std::unique_ptr<DeviceSampler> oracle_sampler = make_cuda_sampler(vocab);
      const Run moved = run_jobs(*gpu, *oracle_sampler, cfg, plugins, jobs,
                                 std::make_shared<OracleTreeProposer>(jobs, plain.tokens, vocab), true);
      CHECK(moved.tokens == plain.tokens);
      CHECK(moved.num_tree_steps > 0);
      CHECK(moved.num_kv_copies > 0);
      CHECK(moved.stats.num_spec_accepted_tokens > 0);
      CHECK(moved.stats.num_spec_accepted_tokens < moved.stats.num_spec_draft_tokens);
    }
  }
  CHECK(ngram_tree_steps > 0);  // prompt lookup drafted trees that branch
}
#endif
