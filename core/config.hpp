// Engine configuration: typed, validated once, then immutable.
//
// Sources, later wins: built-in defaults (documented in config/default.yaml),
// a YAML file (--config), then repeatable KEY=VALUE overrides (--set) with
// dotted keys such as "scheduler.max_num_seqs=32". Unknown keys and bad
// values throw Error(invalid_config) naming the key and what is allowed.
//
// Values: integers may not be negative where the field is unsigned; *_bytes
// keys accept KiB/MiB/GiB/TiB suffixes ("8GiB"); lists are YAML sequences,
// or in --set either "[a, b]" or "a,b"; *_options keys are JSON objects,
// written as a JSON string or as a YAML mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace llmk {

struct ModelSection {
  std::string path;                 // Hugging Face model directory or .gguf file
  std::string load_format = "auto"; // auto | safetensors | gguf | dummy
  // dummy: llama-110m | tinyllama-1.1b | llama2-7b | llama3-8b | llama3.2-1b | qwen2.5-0.5b | mistral-7b |
  // path to config.json
  std::string preset;
  std::string tokenizer;            // tokenizer.model or tokenizer.json override (dummy default: ../shared/models/llama2-tokenizer)
  uint64_t seed = 0;                // dummy weights' seed
  std::string chat_template;        // "" = from tokenizer_config, llama-2 | chatml | a Jinja file

  bool operator==(const ModelSection&) const = default;
};

struct ExecutorSection {
  std::string device = "cpu";  // cpu | cuda
  int32_t num_threads = 0;     // 0 = all cores
  bool cuda_graphs = true;     // cuda: replay decode steps from CUDA graphs captured per batch-size bucket

  bool operator==(const ExecutorSection&) const = default;
};

struct PluginSection {
  std::string attention = "attention.cpu";
  std::string linear = "linear.dense";
  // Weights stored as ggml blocks (a GGUF file's quantized tensors) that
  // plugins.linear does not compute on: this plugin's, where it computes on
  // their type; "none" dequantizes them to F32 for plugins.linear.
  std::string linear_blocks = "linear.gguf";
  std::string kv_allocator = "kv.contiguous";
  std::string linear_options = "{}";        // JSON object passed to the linear plugin
  std::string attention_options = "{}";     // JSON object passed to the attention plugin
  std::string kv_allocator_options = "{}";  // JSON object passed to the allocator
  std::vector<std::string> search_path;     // searched after LLMK_PLUGIN_PATH

  bool operator==(const PluginSection&) const = default;
};

struct KvCacheSection {
  uint64_t capacity_bytes = 0;      // 0: use capacity_fraction
  double capacity_fraction = 0.25;  // of physical memory (CPU) or free memory after weights (GPU)
  uint32_t capacity_tokens = 0;     // nonzero: exact slot count, overrides the two above
  uint32_t block_size = 16;         // 8..256
  std::optional<DType> dtype;       // f32 | f16 | bf16 | i8; nullopt: auto (resolve_kv_dtype, core/model_runtime.hpp)
  uint32_t group_size = 8;          // i8: elements per scale along head_dim
  bool rotate_keys = true;          // i8: cache Hadamard-rotated keys (queries rotated alike)
  bool enable_prefix_caching = true;
  uint32_t max_seq_len = 0;         // 0: the model's max_position_embeddings
  bool prefault = false;            // touch every page of the cache at start-up
  // StreamingLLM (Xiao et al. 2023): a sequence keeps its first sink_tokens
  // K/V rows and the newest window - sink_tokens; positions are assigned
  // within that cache, and the sequence may run past max_seq_len. 0: off.
  // Needs a KV allocator that evicts (API 2.4) and one process.
  uint32_t sink_tokens = 0;         // < window
  uint32_t window = 0;              // K/V rows a sequence keeps, sinks included; <= max_seq_len

  bool operator==(const KvCacheSection&) const = default;
};

struct SchedulerSection {
  std::string policy = "continuous";     // continuous | static
  uint32_t max_num_seqs = 64;
  uint32_t max_num_batched_tokens = 512;
  std::string preemption = "recompute";  // recompute | offload
  uint32_t max_queue = 1024;             // waiting requests beyond this are refused (overloaded)
  // Plan step t+1 while step t computes (its decode rows read step t's ids
  // on the device): Scheduler::schedule_ahead. Off: one step in flight.
  bool overlap = true;

  bool operator==(const SchedulerSection&) const = default;
};

struct ServerSection {
  std::string http = "127.0.0.1:8000";   // "" disables
  std::string zmq = "tcp://127.0.0.1:5555";  // "" disables
  // A broker's worker endpoint (`llmk broker`): the ZeroMQ side connects
  // there as one of its workers instead of binding server.zmq ("" = none).
  std::string zmq_broker;
  uint64_t max_body_bytes = 1 << 20;
  double drain_timeout_s = 30.0;
  std::string served_model_name;          // "" = the model directory's name
  std::string replica_name;               // the metrics' replica label; "" = the HTTP HOST:PORT
  // API keys, per-key limits, ZeroMQ CURVE: a mapping kept as a JSON object,
  // read by ipc::parse_auth_options (ipc/auth.hpp); "{}" = open to all.
  std::string auth = "{}";
  double request_timeout_s = 0;           // a request's deadline unless it sends "timeout"; 0 = none
  // HTTP: a request must arrive whole, and each write to a client complete,
  // within this many seconds, or the connection is closed (> 0).
  double io_timeout_s = 30.0;
  // Polling (POST /v1/poll/...): a finished result is kept this long, and a
  // live one nobody fetches this long is cancelled; at most poll_max_finished
  // finished results are kept (the oldest go first); a long poll waits at
  // most poll_max_wait_s whatever its ?wait= asks (0: fetches never wait).
  double poll_keep_s = 300.0;
  uint32_t poll_max_finished = 1000;
  double poll_max_wait_s = 60.0;
  // HTTPS: {"cert_file": PEM, "key_file": PEM} kept as a JSON object, read by
  // ipc::parse_tls_options (ipc/http_server.hpp); "{}" = plain HTTP.
  std::string tls = "{}";

  bool operator==(const ServerSection&) const = default;
};

// Tensor and pipeline parallelism across processes (an mpirun launch of
// tensor x pipeline ranks, core/parallel.hpp).
struct ParallelSection {
  uint32_t tensor = 1;              // ranks that split every layer's weights (Megatron split)
  uint32_t pipeline = 1;            // stages that split the layers, in contiguous ranges
  std::string comm = "comm.mpi";    // communicator plugin: comm.mpi (host buffers), comm.nccl (CUDA)
  std::string comm_options = "{}";  // JSON object passed to the communicator
  // A call waiting on a peer this long probes it; a peer that does not
  // answer (dead, stopped) ends the job with an error naming it. 0: never.
  double timeout_s = 30.0;
  // Steps a pipeline keeps in flight: 0, one per stage; 1, the stages take
  // turns (for comparison); at most parallel.pipeline.
  uint32_t steps_in_flight = 0;
  bool operator==(const ParallelSection&) const = default;
};

// KV-cache events for KV-aware routers, in the format vLLM publishes
// (docs/kv-events.md): msgpack event batches on a ZeroMQ PUB socket.
struct KvEventsSection {
  // PUB endpoint ("" = off). Bound when it holds '*' or '::' or is ipc://
  // or inproc://, else connected (as vLLM does).
  std::string endpoint;
  std::string replay_endpoint;       // ROUTER bound here resends batches from a sequence number ("" = none)
  std::string topic;                 // first frame of every message
  uint32_t buffer_steps = 10000;     // batches kept for replay
  uint32_t max_queue_events = 100000;  // events waiting for the publisher; more are dropped (counted)

  bool operator==(const KvEventsSection&) const = default;
};

// Prefill/decode disaggregation behind a router that pairs a prefill and a
// decode replica per request (sglang-router --pd-disaggregation;
// docs/replicas.md).
struct DisaggregationSection {
  // none: a request's bootstrap fields are ignored. prefill: compute the
  // prompt and first token, keep its K/V for the decode replica (served on
  // bootstrap_port). decode: fetch that K/V and decode from it.
  std::string mode = "none";
  uint32_t bootstrap_port = 8998;   // prefill: the K/V transfer endpoint (on server.http's host)
  double timeout_s = 60.0;          // a decode waits this long for its prefill; a prefill's K/V is kept as long
  uint32_t max_pending = 256;       // prefill: handoffs kept for decodes that have not fetched them

  bool operator==(const DisaggregationSection&) const = default;
};

// Speculative decoding (core/speculation.hpp): a decode step verifies
// num_tokens drafted tokens besides its own, greedy or sampled (n = 1, or
// each sample after a fork), the output exactly the model's.
struct SpeculativeSection {
  std::string method = "none";     // none | ngram (a proposer plugin, prompt lookup by default) | draft (a draft model) | medusa (heads)
  uint32_t num_tokens = 4;         // drafts per step (k)
  uint32_t prompt_lookup_min = 2;  // ngram: shortest suffix matched
  uint32_t prompt_lookup_max = 4;  // ngram: longest suffix matched (tried first)
  std::string draft_model;         // draft: HF directory or .gguf sharing the target's tokenizer
  std::string draft_linear;        // draft: its linear plugin ("" = plugins.linear)
  uint32_t max_batch_size = 0;     // steps with more decodes than this do not speculate (0: no limit)
  uint32_t tree_width = 1;         // ngram: candidate continuations merged into a token tree (1: a chain)
  uint32_t tree_nodes = 0;         // most draft nodes of a tree (0: num_tokens x tree_width)
  std::string draft_sampling = "greedy";  // draft: greedy | sampled (sampled requests draw drafts from q)
  std::string proposer = "proposer.ngram";  // ngram: the proposer plugin (plugins/api/llmk_proposer.h)
  std::string proposer_options = "{}";      // ngram: JSON object passed to it
  std::string medusa_heads;        // medusa: medusa_lm_head.safetensors, or the directory holding it
  uint32_t medusa_top_k = 4;       // medusa: candidates per head in the tree (top-k product tree)
  std::string medusa_choices;      // medusa: a fixed tree as Medusa's paths, JSON ("": the top-k tree)

  bool operator==(const SpeculativeSection&) const = default;
};

struct EngineConfig {
  ModelSection model;
  ExecutorSection executor;
  PluginSection plugins;
  KvCacheSection kv_cache;
  SchedulerSection scheduler;
  ServerSection server;
  ParallelSection parallel;
  KvEventsSection kv_events;
  DisaggregationSection disaggregation;
  SpeculativeSection speculative;

  bool operator==(const EngineConfig&) const = default;
};

// Applies a YAML document to cfg. `source` names it in errors.
void apply_yaml(EngineConfig& cfg, const std::string& yaml_text, const std::string& source);
void apply_yaml_file(EngineConfig& cfg, const std::filesystem::path& file);
// Applies one "dotted.key=value" override.
void apply_override(EngineConfig& cfg, const std::string& key_equals_value);
// Checks ranges and combinations; throws Error(invalid_config).
void validate(const EngineConfig& cfg);
// The speculative section's part of validate() (core/speculation.cpp).
void validate_speculative(const EngineConfig& cfg);
// Builds: defaults, then file (if non-empty), then overrides; validates.
EngineConfig load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides);
// The effective configuration as YAML (for logs and `llmk info`); applying
// it to a default config gives back `cfg` exactly.
std::string to_yaml(const EngineConfig& cfg);
// Every key as "section.key", in config/default.yaml's order.
std::vector<std::string> config_keys();

}  // namespace llmk
