// Streams, events and graphs, and when stream work runs.
//
// Two execution modes (cudasim::set_execution_mode):
// - deferred (the default): work issued on a stream is queued and runs when
//   the host waits for it (cudaStreamSynchronize, cudaEventSynchronize,
//   cudaDeviceSynchronize, a query, cudaFree, a synchronous copy), in stream
//   order; a stream that waits on an event first runs the event's stream up
//   to the event's record. The legacy default stream runs its work at once,
//   after every other stream's queued work (it synchronises with them). So a
//   host that reads a result before waiting for it reads stale memory, and a
//   host that rewrites pinned memory still used by a queued copy is caught:
//   each queued copy to or from pinned memory keeps a snapshot of the pinned
//   bytes, and the copy compares them when it runs (a hazard: the launch
//   error cudaErrorLaunchFailure at the synchronisation, with the buffer,
//   the bytes and the stream named; cudasim::hazards() lists them).
//   Copies from pageable memory are staged when issued, and copies to
//   pageable memory complete before the call returns, as CUDA does.
// - eager: everything runs when issued, one valid schedule of CUDA's stream
//   semantics (set LLMK_CUDASIM_EXECUTION=eager to choose it at start).
// During stream capture, operations on the captured stream are recorded into
// the graph instead; a graph launch is one queued operation, except that a
// graph holding collectives (simulated NCCL) runs at its launch, after its
// stream's queued work, as the NCCL calls themselves do: a GPU progresses
// without its host, and another rank may wait for the collective while this
// host waits for that rank.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "internal.hpp"

namespace {
struct queued_op {
  std::uint64_t seq;
  std::function<void()> run;
};
}  // namespace

struct CUstream_st {
  unsigned flags = 0;
  cudaGraph_t capture = nullptr;  // the graph being captured into, if any
  std::uint64_t id = 0;
  std::deque<queued_op> queue;  // deferred mode: issued, not yet run
  std::uint64_t num_issued = 0;
};
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
  // The last record's place: its stream and sequence number (0: nothing queued).
  std::uint64_t stream_id = 0, seq = 0;
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;  // in capture order
  bool communicates = false;              // holds collectives other processes wait for
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
  bool communicates = false;
};

namespace cudasim::detail {
namespace {

execution_mode g_mode = [] {
  const char* env = std::getenv("LLMK_CUDASIM_EXECUTION");
  return env && std::string(env) == "eager" ? execution_mode::eager : execution_mode::deferred;
}();
std::recursive_mutex g_mutex;  // the queues, and running them
std::uint64_t g_next_stream_id = 1;
std::unordered_map<std::uint64_t, cudaStream_t> g_streams;  // by id
std::vector<std::string> g_hazards;
std::size_t g_num_hazards = 0;
constexpr std::size_t max_kept_hazards = 16;

bool is_legacy(cudaStream_t s) { return !s || s == cudaStreamLegacy || s == cudaStreamPerThread; }

cudaError_t fail(cudaError_t code, const std::string& detail) {
  set_error(code, detail);
  return code;
}

void flush_to(cudaStream_t s, std::uint64_t seq) {
  std::lock_guard lock(g_mutex);
  while (!s->queue.empty() && s->queue.front().seq <= seq) {
    queued_op op = std::move(s->queue.front());
    s->queue.pop_front();
    op.run();
  }
}

void flush_event(cudaEvent_t e) {
  std::lock_guard lock(g_mutex);
  auto it = g_streams.find(e->stream_id);
  if (it != g_streams.end()) flush_to(it->second, e->seq);
}

std::string hex(const void* p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

// A snapshot of the pinned bytes a queued copy reads or writes.
struct pinned_snapshot {
  const unsigned char* at;
  std::vector<unsigned char> bytes;
  const char* role;  // "read" (the copy's source) or "written" (its destination)
};

void report_hazard(const pinned_snapshot& snap, std::size_t first_changed, std::size_t count, cudaStream_t stream) {
  std::ostringstream s;
  s << "host/device hazard: the host wrote pinned memory at " << hex(snap.at + first_changed) << " (byte "
    << first_changed << " of the " << snap.bytes.size() << " bytes at " << hex(snap.at)
    << ") while a cudaMemcpyAsync of " << count << " bytes queued on stream " << hex(stream) << " that "
    << snap.role << " them had not run: wait for the copy (an event or a stream synchronisation) before reusing the buffer";
  ++g_num_hazards;
  if (g_hazards.size() < max_kept_hazards) g_hazards.push_back(s.str());
  set_error(cudaErrorLaunchFailure, s.str());
  std::fprintf(stderr, "cudasim: %s\n", s.str().c_str());
}

}  // namespace

bool capture_if_active(cudaStream_t stream, std::function<void()> op, bool communicates) {
  if (is_legacy(stream) || !stream->capture) return false;
  stream->capture->ops.push_back(std::move(op));
  stream->capture->communicates |= communicates;
  return true;
}

void enqueue(cudaStream_t stream, std::function<void()> op) {
  if (capture_if_active(stream, op)) return;
  std::lock_guard lock(g_mutex);
  if (g_mode == execution_mode::eager) return op();
  if (is_legacy(stream)) {
    flush_all();
    return op();
  }
  stream->queue.push_back({++stream->num_issued, std::move(op)});
}

void flush_stream(cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  if (is_legacy(stream)) return flush_all();
  flush_to(stream, UINT64_MAX);
}

void flush_all() {
  std::lock_guard lock(g_mutex);
  for (auto& [id, s] : g_streams) flush_to(s, UINT64_MAX);
}

void enqueue_copy(void* dst, const void* src, std::size_t count, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  if (stream && !is_legacy(stream) && stream->capture) {
    capture_if_active(stream, [=] { std::memmove(dst, src, count); });
    return;
  }
  const bool dst_pageable = !is_device_range(dst, count) && !is_pinned_range(dst, count);
  const bool src_pageable = !is_device_range(src, count) && !is_pinned_range(src, count);
  if (g_mode == execution_mode::eager || is_legacy(stream) || dst_pageable) {
    // To pageable memory the copy completes before the call returns.
    flush_stream(stream);
    std::memmove(dst, src, count);
    return;
  }
  if (src_pageable) {
    // From pageable memory CUDA stages the bytes before returning.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    enqueue(stream, [dst, staged] { std::memmove(dst, staged->data(), staged->size()); });
    return;
  }
  auto snapshots = std::make_shared<std::vector<pinned_snapshot>>();
  for (auto [p, role] : {std::pair<const void*, const char*>{src, "read"}, {dst, "written"}}) {
    if (!is_pinned_range(p, count)) continue;
    const auto* at = static_cast<const unsigned char*>(p);
    snapshots->push_back({at, std::vector<unsigned char>(at, at + count), role});
  }
  enqueue(stream, [=] {
    for (const pinned_snapshot& snap : *snapshots)
      for (std::size_t i = 0; i < count; ++i)
        if (snap.at[i] != snap.bytes[i]) {
          report_hazard(snap, i, count, stream);
          break;
        }
    std::memmove(dst, src, count);
  });
}

}  // namespace cudasim::detail

namespace cudasim {

void set_execution_mode(execution_mode mode) {
  detail::flush_all();
  detail::g_mode = mode;
}
execution_mode get_execution_mode() { return detail::g_mode; }
std::size_t hazard_count() { return detail::g_num_hazards; }
std::vector<std::string> hazards() { return detail::g_hazards; }
void clear_hazards() {
  detail::g_num_hazards = 0;
  detail::g_hazards.clear();
}

}  // namespace cudasim

using cudasim::detail::fail;
using namespace cudasim::detail;

extern "C" {

// ---- streams and events -----------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream) return fail(cudaErrorInvalidValue, "cudaStreamCreate: null output pointer");
  std::lock_guard lock(g_mutex);
  *stream = new CUstream_st{flags, nullptr, g_next_stream_id++, {}, 0};
  g_streams[(*stream)->id] = *stream;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (is_legacy(stream)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of the default stream");
  std::lock_guard lock(g_mutex);
  flush_to(stream, UINT64_MAX);  // its queued work still completes
  g_streams.erase(stream->id);
  delete stream->capture;
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!is_legacy(stream) && stream->capture)
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize on a capturing stream");
  flush_stream(stream);
  return sticky_error();
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  // The work is run, then reported done: a poll makes progress.
  if (is_legacy(stream) || !stream->capture) flush_stream(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!event) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: null event");
  std::lock_guard lock(g_mutex);
  if (event->seq == 0) return cudaSuccess;  // nothing queued before its record
  const std::uint64_t stream_id = event->stream_id, seq = event->seq;
  enqueue(stream, [stream_id, seq] {
    auto it = g_streams.find(stream_id);
    if (it != g_streams.end()) flush_to(it->second, seq);
  });
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  flush_all();
  return sticky_error();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return fail(cudaErrorInvalidValue, "cudaEventCreate: null output pointer");
  *event = new CUevent_st{flags, false, {}, 0, 0};
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event) flush_event(event);  // a queued record still completes
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: null event");
  auto record = [event] {
    event->recorded = true;
    event->time = std::chrono::steady_clock::now();
  };
  std::lock_guard lock(g_mutex);
  const bool queues = g_mode == cudasim::execution_mode::deferred && !is_legacy(stream) && !stream->capture;
  enqueue(stream, record);
  event->stream_id = queues ? stream->id : 0;
  event->seq = queues ? stream->num_issued : 0;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: null event");
  flush_event(event);
  return sticky_error();
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: null event");
  flush_event(event);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return fail(cudaErrorInvalidValue, "cudaEventElapsedTime: null argument");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

// ---- stream capture and graphs -------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (is_legacy(stream))
    return fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture on the legacy default stream");
  if (stream->capture) return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
  stream->capture = new CUgraph_st;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (is_legacy(stream) || !stream->capture)
    return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  if (!graph) return fail(cudaErrorInvalidValue, "cudaStreamEndCapture: null output pointer");
  *graph = stream->capture;
  stream->capture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue, "cudaStreamIsCapturing: null output pointer");
  *status = !is_legacy(stream) && stream->capture ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec || !graph) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: null argument");
  *exec = new CUgraphExec_st{graph->ops, graph->communicates};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return fail(cudaErrorInvalidValue, "cudaGraphLaunch: null graph");
  auto replay = [exec] {
    for (const auto& op : exec->ops) op();
  };
  // A GPU runs a graph without the host waiting for it, and other ranks may
  // wait for its collectives while this host waits for them: such a graph
  // runs at its launch, after the stream's queued work, as NCCL calls do.
  if (exec->communicates && !capture_if_active(stream, replay)) {
    flush_stream(stream);
    replay();
    return cudaSuccess;
  }
  enqueue(stream, std::move(replay));
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  flush_all();  // a queued launch of it still completes
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
