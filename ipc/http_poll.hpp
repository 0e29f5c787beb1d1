// Requests served by polling (POST /v1/poll/..., then GET /v1/poll/{id}):
// each keeps, in order, the payloads its SSE stream would carry (the JSON of
// every data: line but [DONE]), so a client fetches from any index it has
// not seen yet, at once or waiting for more (long polling). Finished entries
// are kept for `keep` after they finish and at most `max_finished` of them
// (the oldest go first); live ones nobody fetched for `keep` are handed back
// for cancelling. Plain bookkeeping with one lock; no sockets, no backend.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ipc/errors.hpp"

namespace llmk::ipc {

struct PollLimits {
  std::chrono::milliseconds keep{300000};     // a finished result's lifetime, and a live one's without a fetch
  size_t max_finished = 1000;                 // finished results kept at most
  std::chrono::milliseconds max_wait{60000};  // a long poll's wait at most, whatever it asks
};

class PollStore {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PollStore(PollLimits limits) : limits_(limits) {}

  // A new live entry, fetchable only with the same key name.
  void add(const std::string& id, const std::string& key_name);
  // The payloads of one event; `done` ends the entry. An error before any
  // payload is kept apart as well (first_error) so the submit can answer
  // it with its own status.
  void append(const std::string& id, std::vector<std::string> payloads, bool done,
              const std::optional<ErrorReply>& error = std::nullopt);

  struct Batch {
    std::vector<std::string> payloads;  // from `from` on
    size_t next = 0;                    // the index after the last one returned
    bool done = false;                  // no more will come
    std::optional<ErrorReply> first_error;
  };
  // The payloads from index `from`; while there are none and the entry is
  // live, waits up to `wait` for some. nullopt: no such id for this key.
  std::optional<Batch> fetch(const std::string& id, const std::string& key_name, size_t from,
                             std::chrono::milliseconds wait);
  // Forgets an entry; whether it existed (for this key) and was live.
  struct Erased {
    bool found = false;
    bool live = false;
  };
  Erased erase(const std::string& id, const std::string& key_name);
  // Drops expired finished entries and returns the ids of live entries not
  // fetched for `keep`, which the caller cancels.
  std::vector<std::string> expire(Clock::time_point now);
  // Ends every wait at once (the server is stopping).
  void close();
  size_t size() const;

 private:
  struct Entry {
    std::string key_name;
    std::vector<std::string> payloads;
    bool done = false;
    std::optional<ErrorReply> first_error;
    Clock::time_point touched;  // submit or last fetch; the finish time once done
    bool abandoned = false;     // handed back by expire() once
  };

  const PollLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Entry> entries_;
  bool closed_ = false;
};

}  // namespace llmk::ipc
