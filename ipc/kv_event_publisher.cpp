#include "ipc/kv_event_publisher.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/error.hpp"
#include "ipc/ipc_socket_file.hpp"

namespace llmk::ipc {
namespace {

std::string sequence_bytes(int64_t seq) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(static_cast<uint64_t>(seq) >> (8 * (7 - i)));
  return s;
}

int64_t parse_sequence(const zmq::message_t& frame) {
  if (frame.size() != 8) return -1;
  const auto* p = static_cast<const uint8_t*>(frame.data());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

// vLLM's rule: bind a wildcard or local transport, connect anything else.
bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

constexpr std::chrono::milliseconds kCoalesce{2};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string encode_kv_event_batch(double timestamp, const std::vector<KvEvent>& events) {
  // Group runs: stored blocks that continue the previous stored block's
  // prefix, and removals, travel as one event each.
  struct Group {
    llmk_kv_event_type type;
    std::vector<uint64_t> hashes;
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
    size_t block_size = 0;
  };
  std::vector<Group> groups;
  for (const KvEvent& e : events) {
    Group* last = groups.empty() ? nullptr : &groups.back();
    if (e.type == LLMK_KV_EVENT_BLOCK_STORED && last && last->type == e.type && e.parent_block_hash &&
        *e.parent_block_hash == last->hashes.back() && e.token_ids.size() == last->block_size) {
      last->hashes.push_back(e.block_hash);
      last->tokens.insert(last->tokens.end(), e.token_ids.begin(), e.token_ids.end());
      continue;
    }
    if (e.type == LLMK_KV_EVENT_BLOCK_REMOVED && last && last->type == e.type) {
      last->hashes.push_back(e.block_hash);
      continue;
    }
    Group g{e.type, {}, e.parent_block_hash, e.token_ids, e.token_ids.size()};
    if (e.type != LLMK_KV_EVENT_ALL_BLOCKS_CLEARED) g.hashes.push_back(e.block_hash);
    groups.push_back(std::move(g));
  }

  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> w(buffer);
  w.pack_array(2);
  w.pack_double(timestamp);
  w.pack_array(static_cast<uint32_t>(groups.size()));
  auto tag = [&w](std::string_view name) {
    w.pack_str(static_cast<uint32_t>(name.size()));
    w.pack_str_body(name.data(), static_cast<uint32_t>(name.size()));
  };
  auto hashes = [&w](const std::vector<uint64_t>& list) {
    w.pack_array(static_cast<uint32_t>(list.size()));
    for (uint64_t h : list) w.pack_uint64(h);
  };
  for (const Group& g : groups) {
    switch (g.type) {
      case LLMK_KV_EVENT_BLOCK_STORED:
        w.pack_array(7);
        tag("BlockStored");
        hashes(g.hashes);
        if (g.parent) {
          w.pack_uint64(*g.parent);
        } else {
          w.pack_nil();
        }
        w.pack_array(static_cast<uint32_t>(g.tokens.size()));
        for (int32_t t : g.tokens) w.pack_int32(t);
        w.pack_uint64(g.block_size);
        w.pack_nil();  // lora_id: no adapters
        w.pack_nil();  // medium: the one cache tier
        break;
      case LLMK_KV_EVENT_BLOCK_REMOVED:
        w.pack_array(3);
        tag("BlockRemoved");
        hashes(g.hashes);
        w.pack_nil();  // medium
        break;
      case LLMK_KV_EVENT_ALL_BLOCKS_CLEARED:
        w.pack_array(1);
        tag("AllBlocksCleared");
        break;
    }
  }
  return std::string(buffer.data(), buffer.size());
}

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
  IpcSocketFile pub_file, replay_file;  // ipc:// endpoints bound: removed at shutdown
  std::deque<std::pair<int64_t, std::string>> kept;  // [buffer_steps] (sequence, batch)
};

KvEventPublisher::KvEventPublisher(const KvEventsSection& config)
    : config_(config),
      log_(std::make_shared<KvEventLog>(config.max_queue_events)),
      sockets_(std::make_unique<Sockets>()) {
  auto& pub = sockets_->pub;
  pub.set(zmq::sockopt::sndhwm, 100000);
  pub.set(zmq::sockopt::linger, 0);
  try {
    if (binds(config_.endpoint)) {
      pub.bind(config_.endpoint);
      endpoint_ = pub.get(zmq::sockopt::last_endpoint);
      sockets_->pub_file = IpcSocketFile(endpoint_);
    } else {
      pub.connect(config_.endpoint);
      endpoint_ = config_.endpoint;
    }
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::invalid_config,
                "kv_events.endpoint: cannot open the ZeroMQ PUB socket at " + config_.endpoint + ": " + e.what());
  }
  if (!config_.replay_endpoint.empty()) {
    auto& replay = sockets_->replay.emplace(sockets_->context, zmq::socket_type::router);
    replay.set(zmq::sockopt::linger, 0);
    try {
      replay.bind(config_.replay_endpoint);
    } catch (const zmq::error_t& e) {
      throw Error(ErrorCode::invalid_config, "kv_events.replay_endpoint: cannot bind the ZeroMQ ROUTER socket at " +
                                                 config_.replay_endpoint + ": " + e.what());
    }
    replay_endpoint_ = replay.get(zmq::sockopt::last_endpoint);
    sockets_->replay_file = IpcSocketFile(replay_endpoint_);
  }
  thread_ = std::thread([this] { run(); });
}

KvEventPublisher::~KvEventPublisher() {
  stopping_ = true;
  log_->wake();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::run() {
  Sockets& s = *sockets_;
  const std::string topic = config_.topic;

  const auto publish = [&](const std::vector<KvEvent>& events) {
    const int64_t seq = static_cast<int64_t>(num_batches_.load());
    std::string batch = encode_kv_event_batch(now_seconds(), events);
    try {
      // PUB never blocks: a subscriber past its high-water mark misses the batch (replay recovers it).
      s.pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.pub.send(zmq::buffer(sequence_bytes(seq)), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.pub.send(zmq::buffer(batch), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      spdlog::warn("kv_events: publishing batch {}: {}", seq, e.what());
    }
    s.kept.emplace_back(seq, std::move(batch));
    while (s.kept.size() > config_.buffer_steps) s.kept.pop_front();
    ++num_batches_;
  };

  const auto serve_replays = [&] {
    if (!s.replay) return;
    for (int budget = 0; budget < 64; ++budget) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(*s.replay, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
      if (frames.size() != 3) {
        spdlog::warn("kv_events: a replay request must be [empty] [8-byte sequence], got {} frames",
                     frames.size() - 1);
        continue;
      }
      const std::string identity = frames[0].to_string();
      const int64_t start = parse_sequence(frames[2]);
      const auto reply = [&](const std::string& seq, const std::string& payload) {
        s.replay->send(zmq::buffer(identity), zmq::send_flags::sndmore);
        s.replay->send(zmq::message_t(), zmq::send_flags::sndmore);
        s.replay->send(zmq::buffer(seq), zmq::send_flags::sndmore);
        s.replay->send(zmq::buffer(payload), zmq::send_flags::none);
      };
      try {
        if (start >= 0) {
          for (const auto& [seq, batch] : s.kept)
            if (seq >= start) reply(sequence_bytes(seq), batch);
        }
        reply(sequence_bytes(-1), "");
      } catch (const zmq::error_t& e) {
        spdlog::warn("kv_events: replay: {}", e.what());
      }
    }
  };

  KvEvent cleared;
  cleared.type = LLMK_KV_EVENT_ALL_BLOCKS_CLEARED;
  publish({cleared});
  for (;;) {
    const bool last_round = stopping_.load();
    std::vector<KvEvent> events = log_->take(std::chrono::milliseconds(20));
    if (!events.empty()) {
      publish(events);
      num_events_ += events.size();
    }
    serve_replays();
    if (last_round && events.empty()) break;
    // What the next steps report gathers meanwhile: at most one batch per
    // kCoalesce, however many allocator calls a step makes.
    if (!events.empty() && !stopping_) std::this_thread::sleep_for(kCoalesce);
  }
  const uint64_t dropped = log_->num_dropped();
  if (dropped > 0) spdlog::warn("kv_events: {} event(s) were dropped (kv_events.max_queue_events)", dropped);
}

}  // namespace llmk::ipc
