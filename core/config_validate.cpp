// validate(): the ranges and combinations of an EngineConfig's values
// (core/config.hpp). Every refusal is Error(invalid_config) naming the key.
#include <charconv>
#include <filesystem>
#include <string>

#include "core/config.hpp"
#include "core/config_checks.hpp"
#include "core/device.hpp"
#include "core/error.hpp"

namespace llmk {

using namespace config_detail;

namespace {

std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  return std::string(buf, r.ptr);
}

}  // namespace

void validate(const EngineConfig& c) {
  require_one_of("model.load_format", c.model.load_format, {"auto", "safetensors", "gguf", "dummy"});
  if (c.model.load_format == "dummy" && c.model.preset.empty())
    fail("model.preset", "required with load_format dummy (llama-110m, tinyllama-1.1b, llama2-7b, llama3-8b, "
                         "llama3.2-1b, qwen2.5-0.5b, mistral-7b, or a config.json path)");
  if (c.model.load_format == "gguf" && c.model.path.empty())
    fail("model.path", "required with load_format gguf (a .gguf file)");
  if (c.model.load_format == "safetensors" && c.model.path.empty())
    fail("model.path", "required with load_format safetensors (a Hugging Face model directory)");
  // A built-in name, or a Jinja file (--chat-template FILE).
  if (c.model.chat_template != "" && c.model.chat_template != "llama-2" && c.model.chat_template != "chatml" &&
      !std::filesystem::is_regular_file(c.model.chat_template)) {
    fail("model.chat_template", "'" + c.model.chat_template +
                                    "' is neither a Jinja template file nor a built-in template (allowed: \"\", "
                                    "llama-2, chatml, or a file path)");
  }

  require_one_of("executor.device", c.executor.device, {"cpu", "cuda"});
  // A known device that is not built is refused here rather than silently
  // served by another; the list is core/executor.hpp's, the one make_executor reads.
  if (!has_executor(c.executor.device))
    fail("executor.device", "'" + c.executor.device + "' has no executor in this build (built: " +
                                built_executor_device_names() + ")");
  require_range("executor.num_threads", c.executor.num_threads, 0, 4096, "0 (all cores) to 4096");

  for (const auto& [key, name] : {std::pair{"plugins.attention", &c.plugins.attention},
                                  std::pair{"plugins.linear", &c.plugins.linear},
                                  std::pair{"plugins.linear_blocks", &c.plugins.linear_blocks},
                                  std::pair{"plugins.kv_allocator", &c.plugins.kv_allocator}})
    if (name->empty()) fail(key, "must name a plugin (e.g. attention.cpu, linear.dense, kv.contiguous)");
  check_json_object(c.plugins.linear_options, "plugins.linear_options");
  check_json_object(c.plugins.attention_options, "plugins.attention_options");
  check_json_object(c.plugins.kv_allocator_options, "plugins.kv_allocator_options");

  const auto& kv = c.kv_cache;
  if (!(kv.capacity_fraction > 0.0 && kv.capacity_fraction <= 1.0))
    fail("kv_cache.capacity_fraction", number_text(kv.capacity_fraction) +
                                           " is out of range (allowed: (0, 1], a fraction of memory)");
  require_range("kv_cache.block_size", kv.block_size, 8, 256, "8 to 256");
  if (kv.dtype && *kv.dtype != DType::f32 && *kv.dtype != DType::f16 && *kv.dtype != DType::bf16 &&
      *kv.dtype != DType::i8)
    fail("kv_cache.dtype", std::string("'") + dtype_name(*kv.dtype) + "' is not allowed (allowed: " + kKvDtypeNames + ")");
  require_range("kv_cache.group_size", kv.group_size, 1, 256, "1 to 256, dividing the model's head_dim");
  if (kv.sink_tokens > 0 && kv.window == 0)
    fail("kv_cache.sink_tokens", std::to_string(kv.sink_tokens) + " sink tokens need kv_cache.window (it is 0: off)");
  if (kv.window > 0 && kv.sink_tokens >= kv.window)
    fail("kv_cache.sink_tokens", std::to_string(kv.sink_tokens) + " must be below kv_cache.window (" +
                                     std::to_string(kv.window) + "): the window holds the sinks and newer tokens");
  if (kv.window == 1)
    fail("kv_cache.window", "1 leaves no room beside the newest token (0: off, or at least 2)");

  const auto& s = c.scheduler;
  require_one_of("scheduler.policy", s.policy, {"continuous", "static"});
  require_one_of("scheduler.preemption", s.preemption, {"recompute", "offload"});
  require_range("scheduler.max_num_seqs", s.max_num_seqs, 1, 1e9, ">= 1");
  require_range("scheduler.max_num_batched_tokens", s.max_num_batched_tokens, 1, 1e9, ">= 1");
  require_range("scheduler.max_queue", s.max_queue, 1, 1e9, ">= 1");

  const auto& sv = c.server;
  if (!sv.http.empty()) {
    const auto colon = sv.http.rfind(':');
    int port = 0;
    const std::string port_text = colon == std::string::npos ? "" : sv.http.substr(colon + 1);
    const auto r = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (colon == 0 || colon == std::string::npos || r.ec != std::errc() ||
        r.ptr != port_text.data() + port_text.size() || port < 1 || port > 65535)
      fail("server.http", "'" + sv.http + "' is not HOST:PORT with a port in 1..65535 (or \"\" to disable)");
  }
  if (!sv.zmq.empty() && sv.zmq.find("://") == std::string::npos)
    fail("server.zmq", "'" + sv.zmq + "' is not a ZeroMQ endpoint such as tcp://127.0.0.1:5555 (or \"\" to disable)");
  if (!sv.zmq_broker.empty() && sv.zmq_broker.find("://") == std::string::npos)
    fail("server.zmq_broker",
         "'" + sv.zmq_broker + "' is not a ZeroMQ endpoint such as tcp://127.0.0.1:5556 (or \"\" for none)");
  require_range("server.max_body_bytes", static_cast<double>(sv.max_body_bytes), 1, 1e18, ">= 1");
  require_range("server.drain_timeout_s", sv.drain_timeout_s, 0, 1e9, ">= 0 seconds");
  require_range("server.request_timeout_s", sv.request_timeout_s, 0, 1e9, ">= 0 seconds (0: no deadline)");
  // Zero would let a stalled client hold a connection thread for ever, or
  // drop a polled result before anyone could fetch it.
  require_range("server.io_timeout_s", sv.io_timeout_s, 0.001, 1e9, "> 0 seconds (at least 0.001)");
  require_range("server.poll_keep_s", sv.poll_keep_s, 0.001, 1e9, "> 0 seconds (at least 0.001)");
  require_range("server.poll_max_finished", sv.poll_max_finished, 1, 1e9, ">= 1");
  require_range("server.poll_max_wait_s", sv.poll_max_wait_s, 0, 1e9, ">= 0 seconds (0: fetches never wait)");

  const auto& p = c.parallel;
  require_range("parallel.tensor", p.tensor, 1, 4096, "1 to 4096");
  require_range("parallel.pipeline", p.pipeline, 1, 4096, "1 to 4096");
  if (p.comm.empty()) fail("parallel.comm", "must name a comm plugin (comm.mpi, comm.nccl)");
  check_json_object(p.comm_options, "parallel.comm_options");
  require_range("parallel.timeout_s", p.timeout_s, 0, 1e9, ">= 0 seconds (0: never)");
  if (kv.window > 0 && p.tensor * p.pipeline > 1)
    fail("kv_cache.window", "a streaming window runs in one process (parallel.tensor and parallel.pipeline 1)");
  if (p.steps_in_flight > p.pipeline)
    fail("parallel.steps_in_flight", std::to_string(p.steps_in_flight) + " exceeds the " +
                                         std::to_string(p.pipeline) + " pipeline stages (0: one per stage)");

  const auto& ke = c.kv_events;
  if (!ke.endpoint.empty() && ke.endpoint.find("://") == std::string::npos)
    fail("kv_events.endpoint", "'" + ke.endpoint + "' is not a ZeroMQ endpoint such as tcp://*:5557 (or \"\" for off)");
  if (!ke.replay_endpoint.empty() && ke.replay_endpoint.find("://") == std::string::npos)
    fail("kv_events.replay_endpoint",
         "'" + ke.replay_endpoint + "' is not a ZeroMQ endpoint such as tcp://*:5558 (or \"\" for none)");
  if (ke.endpoint.empty() && !ke.replay_endpoint.empty())
    fail("kv_events.replay_endpoint", "is set but kv_events.endpoint is empty (events are off)");
  require_range("kv_events.buffer_steps", ke.buffer_steps, 1, 1e9, ">= 1");
  require_range("kv_events.max_queue_events", ke.max_queue_events, 1, 1e9, ">= 1");

  const auto& d = c.disaggregation;
  require_one_of("disaggregation.mode", d.mode, {"none", "prefill", "decode"});
  require_range("disaggregation.bootstrap_port", d.bootstrap_port, 1, 65535, "1 to 65535");
  require_range("disaggregation.timeout_s", d.timeout_s, 0.001, 1e9, "> 0 seconds");
  require_range("disaggregation.max_pending", d.max_pending, 1, 1e9, ">= 1");
  if (d.mode != "none" && p.pipeline > 1)  // handoffs save and restore K/V between steps
    fail("disaggregation.mode", d.mode + " needs parallel.pipeline = 1 (it is " + std::to_string(p.pipeline) + ")");
  validate_speculative(c);
}

}  // namespace llmk
