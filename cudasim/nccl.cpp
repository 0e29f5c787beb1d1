// The NCCL subset of the CUDA simulation, with the toolkit's own declarations
// (nccl.h): communicators made from a unique id or by splitting, all-reduce
// (sum of f32, f16, bf16), all-gather, broadcast, send/recv, groups. Each
// rank is a process (one simulated device per process, started by mpirun);
// the data travels over MPI. A separate library (libllmk_cudasim_nccl.so),
// as libnccl is beside libcudart, so only what uses NCCL links MPI.
//
// Model:
// - Stream order: like every simulated stream operation, a call runs when it
//   is issued (or, on a capturing stream, when the graph is replayed), after
//   the work issued before it and before the work issued after it. The host
//   therefore waits in the call until the peers arrive, where a GPU would
//   return and wait on the device: a program that needs the host to go on
//   before its peers reach a collective deadlocks here and not on a GPU.
// - The unique id names the MPI world rank of the process that made it
//   (ncclGetUniqueId), a random nonce and a sequence number. That process
//   must be one of the communicator's ranks: ncclCommInitRank's other ranks
//   send it their world ranks (on MPI_COMM_WORLD, tags 16384-32767), it
//   answers with the table, and the ranks create their own MPI communicator
//   (MPI_Comm_create_group), which carries all later traffic. MPI must be
//   initialized first, at least MPI_THREAD_SERIALIZED when calls come from
//   more than one thread.
// - ncclAllReduce sums element i of chunk c (the elements [c*count/n,
//   (c+1)*count/n) of n ranks) in ring order: it starts as rank c's value and
//   adds ranks c+1, c+2, ..., c+n-1 (mod n), each addition in float and
//   rounded to the element type (f16, bf16: round to nearest even), as the
//   reduce-scatter phase of a ring all-reduce does. Every rank gets the same
//   bits.
// - Groups: calls between ncclGroupStart and the outermost ncclGroupEnd are
//   checked when issued and run at ncclGroupEnd: every send and receive is
//   posted first (nonblocking), then the collectives run in issue order,
//   then the transfers complete, so ranks may post them in any order.
//   Several sends to one peer arrive in issue order.
// - Buffers must be simulated device memory (cudaMalloc), as NCCL needs;
//   at most 2 GiB per call; all-gather in place only at the rank's own slot.
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "internal.hpp"
#include "nccl_internal.hpp"

using namespace cudasim::nccl;

namespace cudasim::nccl {
namespace {

constexpr std::uint64_t kIdMagic = 0x6c6c6d6b6e63636cull;  // the simulation's ids only
constexpr int kBootTagBase = 16384, kBootTags = 16384;      // MPI_TAG_UB is at least 32767
constexpr int kP2pTag = 1;

struct sim_unique_id {
  std::uint64_t magic;
  std::uint64_t nonce;
  std::int32_t root_world_rank;
  std::uint32_t sequence;
};
static_assert(sizeof(sim_unique_id) <= NCCL_UNIQUE_ID_BYTES);

std::string g_last_error;
std::uint32_t g_next_sequence = 0;

thread_local int t_group_depth = 0;
thread_local std::vector<pending_op> t_group_ops;
thread_local ncclResult_t t_group_error = ncclSuccess;

bool mpi_ready() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string mpi_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

// The two ends of the bootstrap exchange (ncclCommInitRank).
struct boot_hello {
  std::uint64_t nonce;
  std::int32_t nranks, rank, world_rank;
};

// The world ranks of the communicator's ranks, in rank order, by way of the
// id's maker; throws nccl_error when the ranks disagree.
std::vector<int> exchange_world_ranks(const sim_unique_id& id, int nranks, int rank) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int tag = kBootTagBase + static_cast<int>(id.sequence % kBootTags);
  std::vector<int> table(static_cast<std::size_t>(nranks), -1);
  if (world_rank != id.root_world_rank) {
    const boot_hello hello{id.nonce, nranks, rank, world_rank};
    MPI_Send(&hello, sizeof hello, MPI_BYTE, id.root_world_rank, tag, MPI_COMM_WORLD);
    std::vector<int> answer(table.size() + 1);  // ok flag, then the table
    MPI_Recv(answer.data(), static_cast<int>(answer.size()), MPI_INT, id.root_world_rank, tag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    if (!answer[0])
      throw nccl_error(ncclInvalidUsage, "ncclCommInitRank: the ranks of this unique id disagree (see the error of "
                                         "world rank " + std::to_string(id.root_world_rank) + ", which made the id)");
    table.assign(answer.begin() + 1, answer.end());
    return table;
  }
  std::string problem;
  table[static_cast<std::size_t>(rank)] = world_rank;
  std::vector<int> members;
  for (int received = 0; received < nranks - 1; ++received) {
    boot_hello hello{};
    MPI_Status status;
    MPI_Recv(&hello, sizeof hello, MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &status);
    members.push_back(status.MPI_SOURCE);
    const std::string who = "world rank " + std::to_string(hello.world_rank);
    if (hello.nonce != id.nonce && problem.empty()) problem = who + " joined with another unique id";
    else if (hello.nranks != nranks && problem.empty())
      problem = who + " asked for " + std::to_string(hello.nranks) + " ranks, this one for " + std::to_string(nranks);
    else if ((hello.rank < 0 || hello.rank >= nranks || table[static_cast<std::size_t>(hello.rank)] != -1) &&
             problem.empty())
      problem = who + " asked for rank " + std::to_string(hello.rank) + ", taken or out of range";
    else if (problem.empty())
      table[static_cast<std::size_t>(hello.rank)] = hello.world_rank;
  }
  std::vector<int> answer{problem.empty() ? 1 : 0};
  answer.insert(answer.end(), table.begin(), table.end());
  for (int member : members)
    MPI_Send(answer.data(), static_cast<int>(answer.size()), MPI_INT, member, tag, MPI_COMM_WORLD);
  if (!problem.empty()) throw nccl_error(ncclInvalidUsage, "ncclCommInitRank: " + problem);
  return table;
}

ncclResult_t finish(ncclComm_t comm, ncclResult_t code, const std::string& detail) {
  g_last_error = detail;
  if (comm) comm->last_error = detail;
  return code;
}

// Runs fn, turning nccl_error into its code and message.
template <class Fn>
ncclResult_t guarded(ncclComm_t comm, Fn&& fn) {
  try {
    fn();
    return ncclSuccess;
  } catch (const nccl_error& e) {
    return finish(comm, e.code, e.what());
  } catch (const std::bad_alloc&) {
    return finish(comm, ncclSystemError, "out of host memory");
  }
}

void check_comm(ncclComm_t comm, const char* call) {
  if (!comm) throw nccl_error(ncclInvalidArgument, std::string(call) + ": null communicator");
  if (comm->aborted) throw nccl_error(ncclInvalidUsage, std::string(call) + ": the communicator was aborted");
  if (!mpi_ready()) throw nccl_error(ncclInvalidUsage, std::string(call) + ": MPI is not initialized (or finalized)");
}

// Runs a group's operations: transfers posted, collectives in order, transfers completed.
void run_ops(const std::vector<pending_op>& ops) {
  std::vector<MPI_Request> requests;
  requests.reserve(ops.size());
  for (const pending_op& op : ops) {
    if (op.kind != op_kind::send && op.kind != op_kind::recv) continue;
    requests.emplace_back();
    const int bytes = static_cast<int>(op.count * dtype_bytes(op.dtype));
    const int code = op.kind == op_kind::send
                         ? MPI_Isend(op.send, bytes, MPI_BYTE, op.root, kP2pTag, op.comm->mpi, &requests.back())
                         : MPI_Irecv(op.recv, bytes, MPI_BYTE, op.root, kP2pTag, op.comm->mpi, &requests.back());
    if (code != MPI_SUCCESS) throw nccl_error(ncclSystemError, op_text(op) + ": " + mpi_text(code));
  }
  for (const pending_op& op : ops)
    if (op.kind != op_kind::send && op.kind != op_kind::recv) run_collective(op);
  const int code = MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  if (code != MPI_SUCCESS) throw nccl_error(ncclRemoteError, "send/recv: " + mpi_text(code));
}

// Runs `ops` now, or records them into the graph their stream is capturing.
void issue(std::vector<pending_op> ops) {
  if (ops.empty()) return;
  std::size_t num_capturing = 0;
  for (const pending_op& op : ops) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(op.stream, &status);
    num_capturing += status == cudaStreamCaptureStatusActive;
  }
  if (num_capturing == 0) {
    // Run now (the host waits for its peers here), after the streams' queued work.
    for (const pending_op& op : ops) cudasim::detail::flush_stream(op.stream);
    return run_ops(ops);
  }
  const cudaStream_t stream = ops.front().stream;
  for (const pending_op& op : ops)
    if (op.stream != stream)
      throw nccl_error(ncclInvalidUsage, "a group captured on more than one stream (or partly captured) is not simulated");
  cudasim::detail::capture_if_active(stream, [ops] {
    try {
      run_ops(ops);
    } catch (const nccl_error& e) {
      for (const pending_op& op : ops) op.comm->async_error = e.code;
      finish(ops.front().comm, e.code, e.what());
      std::fprintf(stderr, "cudasim nccl (graph replay): %s\n", e.what());
    }
  }, /*communicates=*/true);
}

// Checks op, then runs it or (inside a group) queues it.
ncclResult_t submit(pending_op op) {
  const ncclResult_t result = guarded(op.comm, [&] {
    check_comm(op.comm, op_name(op.kind));
    check_op(op);
    if (t_group_depth > 0) t_group_ops.push_back(op);
    else issue({op});
  });
  if (result != ncclSuccess && t_group_depth > 0 && t_group_error == ncclSuccess) t_group_error = result;
  return result;
}

}  // namespace
}  // namespace cudasim::nccl

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return finish(nullptr, ncclInvalidArgument, "ncclGetVersion: null output pointer");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (!unique_id) return finish(nullptr, ncclInvalidArgument, "ncclGetUniqueId: null output pointer");
  if (!mpi_ready())
    return finish(nullptr, ncclInvalidUsage, "ncclGetUniqueId: the simulated NCCL carries its data over MPI; initialize MPI first");
  sim_unique_id id{kIdMagic, 0, 0, g_next_sequence++};
  std::random_device entropy;
  id.nonce = (std::uint64_t{entropy()} << 32) ^ entropy();
  MPI_Comm_rank(MPI_COMM_WORLD, &id.root_world_rank);
  *unique_id = ncclUniqueId{};
  std::memcpy(unique_id->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return guarded(nullptr, [&] {
    if (!comm) throw nccl_error(ncclInvalidArgument, "ncclCommInitRank: null output pointer");
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
      throw nccl_error(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                                std::to_string(nranks) + " ranks");
    if (t_group_depth > 0) throw nccl_error(ncclInvalidUsage, "ncclCommInitRank inside a group is not simulated");
    if (!mpi_ready()) throw nccl_error(ncclInvalidUsage, "ncclCommInitRank: the simulated NCCL carries its data over MPI; initialize MPI first");
    sim_unique_id id{};
    std::memcpy(&id, comm_id.internal, sizeof id);
    if (id.magic != kIdMagic) throw nccl_error(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    const std::vector<int> table = nranks == 1 ? std::vector<int>{world_rank} : exchange_world_ranks(id, nranks, rank);
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, table.data(), &group);
    auto made = std::make_unique<ncclComm>();
    const int code = MPI_Comm_create_group(MPI_COMM_WORLD, group, kBootTagBase + static_cast<int>(id.sequence % kBootTags),
                                           &made->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (code != MPI_SUCCESS) throw nccl_error(ncclSystemError, "ncclCommInitRank: " + mpi_text(code));
    MPI_Comm_set_errhandler(made->mpi, MPI_ERRORS_RETURN);
    made->rank = rank;
    made->size = nranks;
    cudaGetDevice(&made->device);
    *comm = made.release();
  });
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  return guarded(comm, [&] {
    check_comm(comm, "ncclCommSplit");
    if (!newcomm) throw nccl_error(ncclInvalidArgument, "ncclCommSplit: null output pointer");
    if (t_group_depth > 0) throw nccl_error(ncclInvalidUsage, "ncclCommSplit inside a group is not simulated");
    *newcomm = nullptr;
    const bool bad_color = color < 0 && color != NCCL_SPLIT_NOCOLOR;
    // A bad color still takes part (as no color), so that the other ranks return.
    MPI_Comm split = MPI_COMM_NULL;
    const int code = MPI_Comm_split(comm->mpi, color < 0 ? MPI_UNDEFINED : color, key, &split);
    if (code != MPI_SUCCESS) throw nccl_error(ncclSystemError, "ncclCommSplit: " + mpi_text(code));
    if (bad_color)
      throw nccl_error(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) +
                                                " (colors are >= 0, or NCCL_SPLIT_NOCOLOR)");
    if (split == MPI_COMM_NULL) return;
    auto made = std::make_unique<ncclComm>();
    made->mpi = split;
    MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);
    MPI_Comm_rank(split, &made->rank);
    MPI_Comm_size(split, &made->size);
    made->device = comm->device;
    *newcomm = made.release();
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded(comm, [&] { check_comm(comm, "ncclCommFinalize"); });  // every call has completed when it returned
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (comm->mpi != MPI_COMM_NULL && mpi_ready()) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  comm->aborted = true;
  delete comm;  // its MPI communicator is left to MPI_Abort or MPI_Finalize
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return finish(comm, ncclInvalidArgument, "ncclCommCount: null argument");
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return finish(comm, ncclInvalidArgument, "ncclCommUserRank: null argument");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return finish(comm, ncclInvalidArgument, "ncclCommCuDevice: null argument");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return finish(comm, ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  *async_error = comm->async_error;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit({op_kind::all_reduce, comm, sendbuff, recvbuff, count, datatype, op, 0, stream});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit({op_kind::all_gather, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit({op_kind::broadcast, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, stream});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submit({op_kind::send, comm, sendbuff, nullptr, count, datatype, ncclSum, peer, stream});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submit({op_kind::recv, comm, nullptr, recvbuff, count, datatype, ncclSum, peer, stream});
}

ncclResult_t ncclGroupStart() {
  if (t_group_depth++ == 0) {
    t_group_ops.clear();
    t_group_error = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return finish(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<pending_op> ops;
  ops.swap(t_group_ops);
  if (t_group_error != ncclSuccess) return t_group_error;  // a call of the group failed: none of it runs
  return guarded(ops.empty() ? nullptr : ops.front().comm, [&] { issue(std::move(ops)); });
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (the simulation's MPI transport failed)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error.c_str() : g_last_error.c_str(); }

}  // extern "C"
