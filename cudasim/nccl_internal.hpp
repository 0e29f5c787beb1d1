// The simulated NCCL's internals shared by nccl.cpp (the API, groups,
// bootstrap) and nccl_collectives.cpp (the data movement); never included by
// callers, which include the toolkit's nccl.h.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <stdexcept>
#include <string>

// A communicator: one MPI communicator of its ranks, in rank order.
struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
  int device = 0;
  bool aborted = false;
  ncclResult_t async_error = ncclSuccess;  // a failure while a captured graph replayed
  std::string last_error;                  // ncclGetLastError
};

namespace cudasim::nccl {

struct nccl_error : std::runtime_error {
  nccl_error(ncclResult_t c, const std::string& what) : std::runtime_error(what), code(c) {}
  ncclResult_t code;
};

enum class op_kind { all_reduce, all_gather, broadcast, send, recv };

// One call, as issued. `root` is the broadcast's root or the send/recv peer;
// `count` is per rank (all-gather: the send count).
struct pending_op {
  op_kind kind;
  ncclComm_t comm;
  const void* send;
  void* recv;
  std::size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root;
  cudaStream_t stream;
};

const char* op_name(op_kind kind);  // "ncclAllReduce", ...
std::size_t dtype_bytes(ncclDataType_t dtype);  // 0 for a value outside the enum
std::string op_text(const pending_op& op);  // "ncclAllReduce of 12 bf16 (rank 1 of 2)"
// Throws nccl_error naming what is wrong: buffers outside device memory,
// a dtype or reduction not simulated, a root or peer out of range.
void check_op(const pending_op& op);
// Runs a collective now (blocking on the peers).
void run_collective(const pending_op& op);

}  // namespace cudasim::nccl
