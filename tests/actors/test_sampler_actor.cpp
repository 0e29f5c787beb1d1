// The sampler actor on its own: it is sent a request's parameters once, then
// per step only which sample each logits row is for, and it must draw what
// the Sampler draws when handed each sample's whole history (kept here,
// independently, by the test). Out-of-sync or unknown rows, released
// requests and views it cannot read are refused with an error naming why.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "actors/messages.hpp"
#include "actors/pipeline.hpp"

namespace {

using namespace llmk;
using Catch::Contains;

constexpr int32_t kVocab = 300;
constexpr int64_t kStride = 320;  // padded rows: the view's stride, not the vocabulary, spaces them

struct RefRequest {
  std::shared_ptr<const SamplingParams> params;
  std::vector<int32_t> prompt;
  std::vector<std::vector<int32_t>> generated;  // [n]
};

struct Harness {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  sampler_actor sampler;
  PipelineContext context;
  Harness() {
    config.add_message_types<caf::id_block::llmk>();
    system = std::make_unique<caf::actor_system>(config);
    sampler = spawn_sampler(*system, context);
  }
  ~Harness() {
    caf::anon_send_exit(sampler, caf::exit_reason::user_shutdown);
    sampler = nullptr;
    system.reset();
  }
  // The sampler's answer, or the text of its error.
  std::variant<StepResult, std::string> sample(SampleWork work, LogitsView view) {
    std::variant<StepResult, std::string> out;
    caf::scoped_actor self{*system};
    self->request(sampler, std::chrono::seconds(10), sample_atom::value, std::move(work), view)
        .receive([&](StepResult& r) { out = std::move(r); }, [&](caf::error& e) { out = describe(e); });
    return out;
  }
};

LogitsView host_view(const std::vector<float>& logits, int32_t rows) {
  LogitsView v;
  v.device = Device::cpu;
  v.data = logits.data();
  v.num_rows = rows;
  v.vocab_size = kVocab;
  v.row_stride = kStride;
  return v;
}

}  // namespace

TEST_CASE("the sampler actor draws from deltas what the Sampler draws from whole histories", "[sampler][actor]") {
  Harness h;
  std::mt19937 rng(3);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::map<uint64_t, RefRequest> ref;
  auto make = [&](uint64_t key, float temperature, float repetition, float frequency, int32_t n, uint64_t seed) {
    auto p = std::make_shared<SamplingParams>();
    p->temperature = temperature;
    p->repetition_penalty = repetition;
    p->frequency_penalty = frequency;
    p->presence_penalty = frequency / 2;
    p->top_k = key % 2 ? 50 : 0;
    p->n = n;
    p->seed = seed;
    RefRequest r;
    r.params = p;
    for (int i = 0; i < 12; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % kVocab));
    r.generated.resize(static_cast<size_t>(n));
    ref[key] = r;
    return SamplerOpen{key, p, n, repetition != 1.0f ? r.prompt : std::vector<int32_t>{}};
  };
  Sampler reference(kVocab, 1);
  std::vector<uint64_t> live;
  std::vector<SamplerOpen> pending_opens = {make(11, 0.9f, 1.3f, 0.5f, 1, 7), make(12, 0.0f, 1.0f, 0.0f, 1, 8),
                                            make(13, 1.1f, 1.0f, 0.8f, 2, 9)};
  live = {11, 12, 13};
  for (uint64_t step = 1; step <= 24; ++step) {
    SampleWork work;
    work.step = step;
    work.opened = std::move(pending_opens);
    pending_opens.clear();
    if (step == 9) {  // request 12 ends; 14 arrives
      work.released = {12};
      ref.erase(12);
      live = {11, 13, 14};
      work.opened.push_back(make(14, 0.7f, 1.2f, 0.0f, 1, 10));
    }
    for (uint64_t key : live)
      for (int32_t k = 0; k < static_cast<int32_t>(ref[key].generated.size()); ++k)
        work.rows.push_back(SampleRow{key, k, static_cast<int32_t>(ref[key].generated[static_cast<size_t>(k)].size())});
    const int32_t rows = static_cast<int32_t>(work.rows.size());
    std::vector<float> logits(static_cast<size_t>(rows) * kStride, 1e9f);  // padding must never be read as a logit
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t v = 0; v < kVocab; ++v) logits[static_cast<size_t>(r) * kStride + v] = logit(rng);
    std::vector<int32_t> expected;
    for (int32_t r = 0; r < rows; ++r) {
      const SampleRow& row = work.rows[static_cast<size_t>(r)];
      RefRequest& req = ref[row.request_key];
      SamplerRow in;
      in.logits = logits.data() + static_cast<size_t>(r) * kStride;
      in.params = req.params.get();
      in.prompt_ids = req.prompt;
      in.generated_ids = req.generated[static_cast<size_t>(row.sample_index)];
      in.seed = *req.params->seed;
      in.sample_index = static_cast<uint32_t>(row.sample_index);
      expected.push_back(reference.sample_one(in).token_id);
    }
    auto got = h.sample(work, host_view(logits, rows));
    REQUIRE(std::holds_alternative<StepResult>(got));
    const StepResult& result = std::get<StepResult>(got);
    CHECK(result.step == step);
    REQUIRE(result.tokens.size() == expected.size());
    for (int32_t r = 0; r < rows; ++r) {
      CHECK(result.tokens[static_cast<size_t>(r)].token_id == expected[static_cast<size_t>(r)]);
      const SampleRow& row = work.rows[static_cast<size_t>(r)];
      ref[row.request_key].generated[static_cast<size_t>(row.sample_index)].push_back(expected[static_cast<size_t>(r)]);
    }
  }
  // The two samples of request 13 drew differently.
  CHECK(ref[13].generated[0] != ref[13].generated[1]);

  std::vector<float> one(kStride, 0.0f);
  auto error_of = [&](SampleWork work, LogitsView view) {
    auto got = h.sample(std::move(work), view);
    REQUIRE(std::holds_alternative<std::string>(got));
    return std::get<std::string>(got);
  };
  const int32_t num_11 = static_cast<int32_t>(ref[11].generated[0].size());
  CHECK_THAT(error_of(SampleWork{30, {}, {}, {SampleRow{11, 0, num_11 + 1}}, 0}, host_view(one, 1)),
             Contains("in the scheduler"));
  CHECK_THAT(error_of(SampleWork{31, {}, {}, {SampleRow{12, 0, 8}}, 0}, host_view(one, 1)),
             Contains("no state for request 12"));
  CHECK_THAT(error_of(SampleWork{32, {}, {}, {SampleRow{11, 1, num_11}}, 0}, host_view(one, 1)),
             Contains("sample 1 of a request with 1"));
  CHECK_THAT(error_of(SampleWork{33, {}, {}, {SampleRow{11, 0, num_11}}, 0}, host_view(one, 2)),
             Contains("2 logits rows for 1 sample rows"));
  LogitsView pending = host_view(one, 1);
  pending.ready.event = &one;
  CHECK_THAT(error_of(SampleWork{34, {}, {}, {SampleRow{11, 0, num_11}}, 0}, pending), Contains("pending event"));
  LogitsView device = host_view(one, 1);
  device.device = Device::cuda;
  // The sampler is the CPU's since the first view: one engine samples on one device.
  CHECK_THAT(error_of(SampleWork{35, {}, {}, {SampleRow{11, 0, num_11}}, 0}, device),
             Contains("views of two devices ('cpu', 'cuda')"));
  // After its release, a request is unknown.
  CHECK_THAT(error_of(SampleWork{36, {}, {11}, {SampleRow{11, 0, num_11}}, 0}, host_view(one, 1)),
             Contains("no state for request 11"));
}

TEST_CASE("rows fed from a step the sampler never sampled draw into scratch histories; other rows as usual",
          "[sampler][actor][overlap]") {
  Harness h;
  auto greedy = std::make_shared<SamplingParams>();
  greedy->temperature = 0.0f;
  std::vector<float> logits(2 * kStride, 0.0f);
  logits[5] = 10.0f;            // row 0 argmax 5
  logits[kStride + 7] = 10.0f;  // row 1 argmax 7
  auto tokens_of = [](const std::variant<StepResult, std::string>& got) {
    REQUIRE(std::holds_alternative<StepResult>(got));
    std::vector<int32_t> ids;
    for (const auto& t : std::get<StepResult>(got).tokens) ids.push_back(t.token_id);
    return ids;
  };
  SampleWork first{1, {SamplerOpen{11, greedy, 1, {}}, SamplerOpen{12, greedy, 1, {}}}, {},
                   {SampleRow{11, 0, 0}, SampleRow{12, 0, 0}}, 0};
  CHECK(tokens_of(h.sample(first, host_view(logits, 2))) == std::vector<int32_t>{5, 7});
  // Step 2 failed before the sampler; step 3 was planned ahead of it. Request
  // 11's row is one id ahead (step 2 would have given it, and its failure
  // ended the sequence); request 12 was not in step 2.
  SampleWork ahead{3, {}, {}, {SampleRow{11, 0, 2}, SampleRow{12, 0, 1}}, 0, /*fed_from=*/2};
  CHECK(tokens_of(h.sample(ahead, host_view(logits, 2))) == std::vector<int32_t>{5, 7});
  // 11's history did not move; 12's did.
  SampleWork next{4, {}, {}, {SampleRow{11, 0, 1}, SampleRow{12, 0, 2}}, 0};
  CHECK(tokens_of(h.sample(next, host_view(logits, 2))) == std::vector<int32_t>{5, 7});
  // Fed from a step that was sampled, the same gap is a real disagreement.
  std::vector<float> one(kStride, 0.0f);
  auto got = h.sample(SampleWork{5, {}, {}, {SampleRow{11, 0, 3}}, 0, /*fed_from=*/4}, host_view(one, 1));
  REQUIRE(std::holds_alternative<std::string>(got));
  CHECK_THAT(std::get<std::string>(got), Contains("in the scheduler"));
}

TEST_CASE("a step whose ids the executor published: the sampler checks them against its own, publishes nothing, "
          "and marks every step sampled", "[sampler][actor][overlap]") {
  Harness h;
  StepFeedback& feedback = *h.context.feedback;
  auto greedy = std::make_shared<SamplingParams>();
  greedy->temperature = 0.0f;
  std::vector<float> logits(2 * kStride, 0.0f);
  logits[5] = 10.0f;            // row 0 argmax 5
  logits[kStride + 7] = 10.0f;  // row 1 argmax 7
  // Step 1 the usual way: the sampler publishes its ids, and marks it sampled.
  SampleWork first{1, {SamplerOpen{11, greedy, 1, {}}, SamplerOpen{12, greedy, 1, {}}}, {},
                   {SampleRow{11, 0, 0}, SampleRow{12, 0, 0}}, 0};
  REQUIRE(std::holds_alternative<StepResult>(h.sample(first, host_view(logits, 2))));
  const SampledIds one = feedback.wait(1, std::chrono::seconds(1));
  CHECK(std::vector<int32_t>(one.data, one.data + one.count) == std::vector<int32_t>{5, 7});
  feedback.wait_sampled(1, std::chrono::seconds(1));

  // Step 2: the executor published {5, 7} itself (as it does for raw-argmax
  // steps). The sampler agrees, and leaves the executor's ids in place.
  const std::vector<int32_t> executor_ids = {5, 7};
  SampledIds published;
  published.data = executor_ids.data();
  published.count = 2;
  feedback.publish(2, published);
  SampleWork second{2, {}, {}, {SampleRow{11, 0, 1}, SampleRow{12, 0, 1}}, 0};
  second.raw_argmax = true;
  second.published_ids = executor_ids;
  auto got = h.sample(second, host_view(logits, 2));
  REQUIRE(std::holds_alternative<StepResult>(got));
  CHECK(std::get<StepResult>(got).tokens[1].token_id == 7);
  feedback.wait_sampled(2, std::chrono::seconds(1));
  const SampledIds two = feedback.wait(2, std::chrono::seconds(1));
  CHECK_FALSE(two.failed);
  CHECK(std::vector<int32_t>(two.data, two.data + two.count) == executor_ids);

  // Step 3: published ids the sampler would not pick are an internal error
  // naming the row and both ids; the step is still marked sampled (its
  // logits are free), and the executor's ids are not replaced by a failure.
  const std::vector<int32_t> wrong = {5, 8};
  published.data = wrong.data();
  feedback.publish(3, published);
  SampleWork third{3, {}, {}, {SampleRow{11, 0, 2}, SampleRow{12, 0, 2}}, 0};
  third.raw_argmax = true;
  third.published_ids = wrong;
  got = h.sample(third, host_view(logits, 2));
  REQUIRE(std::holds_alternative<std::string>(got));
  CHECK_THAT(std::get<std::string>(got), Contains("step 3 row 1: the executor's argmax picked token 8, the sampler 7"));
  feedback.wait_sampled(3, std::chrono::seconds(1));
  CHECK_FALSE(feedback.wait(3, std::chrono::seconds(1)).failed);
}
