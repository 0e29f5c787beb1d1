// `llmk serve` over ZeroMQ through llmk::Client (needs llmk_ipc).
#include "apps/bench/targets.hpp"
#include "ipc/client.hpp"

namespace llmk::bench {
namespace {

class ZmqTarget : public Target {
 public:
  explicit ZmqTarget(const std::string& endpoint) : endpoint_(endpoint), client_(endpoint) {}
  void submit(Request request, EventCallback on_event) override { client_.submit(request, true, std::move(on_event)); }
  std::optional<EngineStats> stats() override {
    try {
      const nlohmann::json j = client_.stats(std::chrono::seconds(2));
      EngineStats s;
      s.num_running = j.value("num_running", uint64_t{0});
      s.num_waiting = j.value("num_waiting", uint64_t{0});
      s.num_requests_total = j.value("num_requests_total", uint64_t{0});
      s.num_requests_finished = j.value("num_requests_finished", uint64_t{0});
      s.num_prompt_tokens = j.value("num_prompt_tokens", uint64_t{0});
      s.num_prefill_tokens = j.value("num_prefill_tokens", uint64_t{0});
      s.num_generated_tokens = j.value("num_generated_tokens", uint64_t{0});
      s.num_preemptions = j.value("num_preemptions", uint64_t{0});
      s.num_steps = j.value("num_steps", uint64_t{0});
      s.mean_batch_seqs = j.value("mean_batch_seqs", 0.0);
      s.mean_batch_tokens = j.value("mean_batch_tokens", 0.0);
      s.peak_running = j.value("peak_running", uint64_t{0});
      if (auto kv = j.find("kv"); kv != j.end() && kv->is_object()) {
        s.kv.total_slots = kv->value("total_slots", uint64_t{0});
        s.kv.reserved_slots = kv->value("reserved_slots", uint64_t{0});
        s.kv.used_slots = kv->value("used_slots", uint64_t{0});
        s.kv.num_seqs = kv->value("num_seqs", uint64_t{0});
        s.kv.num_relocations = kv->value("num_relocations", uint64_t{0});
      }
      return s;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  std::string name() const override { return "zmq " + endpoint_; }

 private:
  std::string endpoint_;
  Client client_;
};

}  // namespace

std::unique_ptr<Target> make_zmq_target(const std::string& endpoint) { return std::make_unique<ZmqTarget>(endpoint); }

}  // namespace llmk::bench
