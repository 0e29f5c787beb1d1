#include "ipc/client.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "core/error.hpp"
#include "ipc/mailbox.hpp"
#include "ipc/zmq_curve.hpp"
#include "ipc/zmq_protocol.hpp"

namespace llmk {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Command {
  std::string payload;                               // sent as is ("" = none)
  std::string request_id;                            // submit: register this request
  bool stream = true;
  Client::EventCallback on_event;
  std::string ref;                                   // health/stats: the reply's ref
  std::shared_ptr<std::promise<json>> reply;
};

json sampling_json(const SamplingParams& s) {
  json p = {{"max_tokens", s.max_tokens},   {"temperature", s.temperature},
            {"top_p", s.top_p},             {"top_k", s.top_k},
            {"min_p", s.min_p},             {"n", s.n},
            {"presence_penalty", s.presence_penalty}, {"frequency_penalty", s.frequency_penalty},
            {"repetition_penalty", s.repetition_penalty}, {"ignore_eos", s.ignore_eos}};
  if (s.seed) p["seed"] = *s.seed;
  if (s.logprobs >= 0) p["logprobs"] = s.logprobs;
  if (!s.stop.empty()) p["stop"] = s.stop;
  if (!s.stop_token_ids.empty()) p["stop_token_ids"] = s.stop_token_ids;
  return p;
}

class QueueStream : public EventStream {
 public:
  void push(const RequestEvent& ev) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(ev);
    }
    ready_.notify_one();
  }
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    if (done_) return std::nullopt;
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    RequestEvent ev = std::move(events_.front());
    events_.pop_front();
    done_ = ev.request_done;
    return ev;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestEvent> events_;
  bool done_ = false;
};

}  // namespace

struct Client::Impl {
  struct Live {
    bool stream = true;
    EventCallback on_event;
  };

  std::string endpoint;
  ClientOptions options;
  zmq::context_t context{1};
  zmq::socket_t dealer{context, zmq::socket_type::dealer};
  ipc::Mailbox<Command> mailbox;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_ref{0};
  std::thread thread;

  // I/O thread only.
  std::map<std::string, Live> live;
  std::map<std::string, std::shared_ptr<std::promise<json>>> calls;
  Clock::time_point last_heard = Clock::now();

  static RequestEvent failure(const std::string& id, ErrorCode code, std::string message) {
    RequestEvent ev;
    ev.request_id = id;
    ev.finished = ev.request_done = true;
    ev.finish_reason = FinishReason::error;
    ev.error_code = code;
    ev.error = std::move(message);
    return ev;
  }

  // Never blocks: a DEALER with no peer to queue to (a CURVE handshake the
  // server refused drops the connection's queue) would block forever. A
  // message dropped so leaves its request live until server_timeout fails it.
  void send(const std::string& payload) {
    (void)dealer.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  }

  void handle_command(Command& c) {
    if (!c.request_id.empty()) {
      if (live.count(c.request_id)) {
        c.on_event(failure(c.request_id, ErrorCode::invalid_argument,
                           "request id '" + c.request_id + "' is already live on this client"));
        return;
      }
      if (live.empty()) last_heard = Clock::now();
      live[c.request_id] = {c.stream, std::move(c.on_event)};
    }
    if (c.reply) calls[c.ref] = c.reply;
    if (!c.payload.empty()) send(c.payload);
  }

  void handle_reply(const std::string& payload) {
    last_heard = Clock::now();
    const json msg = json::parse(payload, nullptr, false);
    if (!msg.is_object()) return;
    const std::string type = msg.value("type", "");
    if (type == "health" || type == "stats" || type == "pong") {
      auto ref = msg.value("ref", json());
      if (ref.is_string()) {
        auto it = calls.find(ref.get<std::string>());
        if (it != calls.end()) {
          it->second->set_value(msg);
          calls.erase(it);
        }
      }
      return;
    }
    if (type != "token" && type != "final" && type != "error") return;  // keepalive
    const json id = msg.value("id", json());
    if (!id.is_string()) return;  // an error about a message that had no usable id
    auto it = live.find(id.get<std::string>());
    if (it == live.end()) return;
    const RequestEvent ev = ipc::event_from_message(msg, it->second.stream);
    it->second.on_event(ev);
    if (ev.request_done) live.erase(it);
  }

  void run() {
    zmq::pollitem_t items[] = {{dealer.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, mailbox.fd(), ZMQ_POLLIN, 0}};
    while (!stopping) {
      zmq::poll(items, 2, std::chrono::milliseconds(100));
      for (auto& c : mailbox.take()) handle_command(c);
      while (items[0].revents & ZMQ_POLLIN) {
        zmq::message_t m;
        if (!dealer.recv(m, zmq::recv_flags::dontwait)) break;
        handle_reply(m.to_string());
      }
      if (!live.empty() && Clock::now() - last_heard > options.server_timeout) {
        for (auto& [id, l] : live) {
          l.on_event(failure(id, ErrorCode::internal, "the server at " + endpoint + " did not answer for " +
                                                          std::to_string(options.server_timeout.count()) + " ms"));
        }
        live.clear();
      }
    }
    send(dump_json({{"v", ipc::zmq_protocol_version}, {"type", "bye"}}));
  }

  json call(const std::string& type, std::chrono::milliseconds timeout) {
    Command c;
    c.ref = type + "-" + std::to_string(++next_ref);
    c.reply = std::make_shared<std::promise<json>>();
    auto future = c.reply->get_future();
    c.payload = ipc::dump_json({{"v", ipc::zmq_protocol_version}, {"type", type}, {"ref", c.ref}});
    mailbox.post(std::move(c));
    if (future.wait_for(timeout) != std::future_status::ready) {
      throw Error(ErrorCode::internal, "no " + type + " reply from " + endpoint + " within " +
                                           std::to_string(timeout.count()) + " ms");
    }
    return future.get();
  }

  static std::string dump_json(const json& j) { return ipc::dump_json(j); }
};

Client::Client(const std::string& endpoint, ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->endpoint = endpoint;
  impl_->options = options;
  impl_->dealer.set(zmq::sockopt::linger, 200);
  impl_->dealer.set(zmq::sockopt::sndhwm, 1 << 20);
  impl_->dealer.set(zmq::sockopt::rcvhwm, 1 << 20);
  if (!options.curve_server_key.empty())
    ipc::make_curve_client(impl_->dealer, options.curve_server_key,
                           {options.curve_public_key, options.curve_secret_key});
  try {
    impl_->dealer.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::invalid_argument, "cannot connect to " + endpoint + ": " + e.what());
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

Client::~Client() {
  impl_->stopping = true;
  impl_->mailbox.wake();
  impl_->thread.join();
}

void Client::submit(const Request& request, bool stream, EventCallback on_event) {
  json msg = {{"v", ipc::zmq_protocol_version}, {"type", "submit"},   {"id", request.id},
              {"stream", stream},               {"add_bos", request.add_bos}, {"params", sampling_json(request.sampling)}};
  if (request.prompt_token_ids.empty()) {
    msg["prompt"] = request.prompt;
  } else {
    msg["prompt_token_ids"] = request.prompt_token_ids;
  }
  Command c;
  c.payload = ipc::dump_json(msg);
  c.request_id = request.id;
  c.stream = stream;
  c.on_event = std::move(on_event);
  impl_->mailbox.post(std::move(c));
}

std::unique_ptr<EventStream> Client::submit(const Request& request, bool stream) {
  auto queue = std::make_shared<QueueStream>();
  submit(request, stream, [queue](const RequestEvent& ev) { queue->push(ev); });
  // The stream shares the queue with the callback, which may outlive it.
  struct Handle : EventStream {
    std::shared_ptr<QueueStream> queue;
    std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override { return queue->next(timeout); }
  };
  auto handle = std::make_unique<Handle>();
  handle->queue = std::move(queue);
  return handle;
}

void Client::cancel(const std::string& request_id) {
  Command c;
  c.payload = ipc::dump_json({{"v", ipc::zmq_protocol_version}, {"type", "cancel"}, {"id", request_id}});
  impl_->mailbox.post(std::move(c));
}

nlohmann::json Client::health(std::chrono::milliseconds timeout) { return impl_->call("health", timeout); }
nlohmann::json Client::stats(std::chrono::milliseconds timeout) { return impl_->call("stats", timeout); }

Client::Result Client::generate(const Request& request, bool stream, std::chrono::milliseconds timeout) {
  auto events = submit(request, stream);
  Result result;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto ev = left.count() > 0 ? events->next(left) : std::nullopt;
    if (!ev) {
      cancel(request.id);
      throw Error(ErrorCode::internal, "request '" + request.id + "' did not finish within " +
                                           std::to_string(timeout.count()) + " ms");
    }
    if (ev->finish_reason == FinishReason::error) throw Error(ev->error_code, ev->error);
    const auto i = static_cast<size_t>(ev->index);
    if (result.texts.size() <= i) {
      result.texts.resize(i + 1);
      result.token_ids.resize(i + 1);
      result.finish_reasons.resize(i + 1, FinishReason::none);
    }
    result.texts[i] += ev->text_delta;
    result.token_ids[i].insert(result.token_ids[i].end(), ev->token_ids.begin(), ev->token_ids.end());
    if (ev->finished) {
      result.finish_reasons[i] = ev->finish_reason;
      result.usage.prompt_tokens = ev->usage.prompt_tokens;
      result.usage.completion_tokens += ev->usage.completion_tokens;
      if (i == 0) result.timings = ev->timings;
    }
    if (ev->request_done) return result;
  }
}

}  // namespace llmk
