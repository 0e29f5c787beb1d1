// The simulated NCCL's checks and data movement (see nccl.cpp for the model).
#include <climits>
#include <cstring>
#include <vector>

#include "internal.hpp"
#include "nccl_internal.hpp"

namespace cudasim::nccl {
namespace {

const char* dtype_name(ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "f16";
    case ncclFloat32: return "f32";
    case ncclFloat64: return "f64";
    case ncclBfloat16: return "bf16";
    case ncclFloat8e4m3: return "f8e4m3";
    case ncclFloat8e5m2: return "f8e5m2";
    default: return "?";
  }
}

std::size_t op_bytes(const pending_op& op) { return op.count * dtype_bytes(op.dtype); }

void check_device(const pending_op& op, const void* p, std::size_t bytes, const char* which) {
  if (bytes == 0) return;
  if (!p) throw nccl_error(ncclInvalidArgument, op_text(op) + ": " + which + " is null");
  if (!cudasim::detail::is_device_range(p, bytes))
    throw nccl_error(ncclInvalidArgument, op_text(op) + ": " + which + " (" + std::to_string(bytes) +
                                              " bytes) is not inside one device allocation (cudaMalloc)");
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

void check_peer(const pending_op& op, const char* what) {
  if (op.root < 0 || op.root >= op.comm->size)
    throw nccl_error(ncclInvalidArgument, op_text(op) + ": " + what + " " + std::to_string(op.root) + " is not a rank of " +
                                              std::to_string(op.comm->size));
}

void throw_on(int code, const pending_op& op) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw nccl_error(ncclRemoteError, op_text(op) + ": " + std::string(text, static_cast<std::size_t>(len)));
}

float to_float(float x) { return x; }
float to_float(__half x) { return __half2float(x); }
float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
T from_float(float x);
template <>
float from_float<float>(float x) { return x; }
template <>
__half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// out[i] = the ring-order sum of ranks' element i (nccl.cpp states the order);
// all: the n ranks' buffers of count elements, rank after rank.
template <class T>
void ring_sum(const unsigned char* all, void* out, std::size_t count, int n) {
  const T* x = reinterpret_cast<const T*>(all);
  T* y = static_cast<T*>(out);
  for (int c = 0; c < n; ++c) {
    const std::size_t begin = count * static_cast<std::size_t>(c) / n, end = count * static_cast<std::size_t>(c + 1) / n;
    for (std::size_t i = begin; i < end; ++i) {
      T acc = x[static_cast<std::size_t>(c) * count + i];
      for (int j = 1; j < n; ++j)
        acc = from_float<T>(to_float(acc) + to_float(x[static_cast<std::size_t>((c + j) % n) * count + i]));
      y[i] = acc;
    }
  }
}

}  // namespace

const char* op_name(op_kind kind) {
  switch (kind) {
    case op_kind::all_reduce: return "ncclAllReduce";
    case op_kind::all_gather: return "ncclAllGather";
    case op_kind::broadcast: return "ncclBroadcast";
    case op_kind::send: return "ncclSend";
    case op_kind::recv: return "ncclRecv";
  }
  return "?";
}

std::size_t dtype_bytes(ncclDataType_t dtype) {
  switch (dtype) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

std::string op_text(const pending_op& op) {
  std::string text = std::string(op_name(op.kind)) + " of " + std::to_string(op.count) + " " + dtype_name(op.dtype);
  if (op.comm) text += " (rank " + std::to_string(op.comm->rank) + " of " + std::to_string(op.comm->size) + ")";
  return text;
}

void check_op(const pending_op& op) {
  if (dtype_bytes(op.dtype) == 0)
    throw nccl_error(ncclInvalidArgument, op_text(op) + ": datatype " + std::to_string(static_cast<int>(op.dtype)) +
                                              " is not an ncclDataType_t");
  const std::size_t bytes = op_bytes(op);
  const std::size_t total = op.kind == op_kind::all_gather ? bytes * static_cast<std::size_t>(op.comm->size) : bytes;
  if (op.count > SIZE_MAX / 16 || total > static_cast<std::size_t>(INT_MAX))
    throw nccl_error(ncclInvalidArgument, op_text(op) + ": more than 2 GiB in one call is not simulated");
  switch (op.kind) {
    case op_kind::all_reduce:
      if (op.op != ncclSum)
        throw nccl_error(ncclInvalidArgument, op_text(op) + ": reduction " + std::to_string(static_cast<int>(op.op)) +
                                                  " is not simulated (ncclSum only)");
      if (op.dtype != ncclFloat32 && op.dtype != ncclFloat16 && op.dtype != ncclBfloat16)
        throw nccl_error(ncclInvalidArgument, op_text(op) + ": only f32, f16 and bf16 sums are simulated");
      check_device(op, op.send, bytes, "sendbuff");
      check_device(op, op.recv, bytes, "recvbuff");
      if (op.send != op.recv && overlap(op.send, bytes, op.recv, bytes))
        throw nccl_error(ncclInvalidArgument, op_text(op) + ": sendbuff and recvbuff overlap without being equal");
      return;
    case op_kind::all_gather: {
      check_device(op, op.send, bytes, "sendbuff");
      check_device(op, op.recv, total, "recvbuff");
      const auto* slot = static_cast<const unsigned char*>(op.recv) + bytes * static_cast<std::size_t>(op.comm->rank);
      if (op.send != slot && overlap(op.send, bytes, op.recv, total))
        throw nccl_error(ncclInvalidArgument, op_text(op) + ": sendbuff overlaps recvbuff other than as this rank's slot "
                                                            "(recvbuff + rank * sendcount, the in-place form)");
      return;
    }
    case op_kind::broadcast:
      check_peer(op, "root");
      check_device(op, op.recv, bytes, "recvbuff");
      if (op.comm->rank == op.root) {
        check_device(op, op.send, bytes, "sendbuff");
        if (op.send != op.recv && overlap(op.send, bytes, op.recv, bytes))
          throw nccl_error(ncclInvalidArgument, op_text(op) + ": sendbuff and recvbuff overlap without being equal");
      }
      return;
    case op_kind::send:
      check_peer(op, "peer");
      check_device(op, op.send, bytes, "sendbuff");
      return;
    case op_kind::recv:
      check_peer(op, "peer");
      check_device(op, op.recv, bytes, "recvbuff");
      return;
  }
}

void run_collective(const pending_op& op) {
  const std::size_t bytes = op_bytes(op);
  const int n = op.comm->size, ibytes = static_cast<int>(bytes);
  switch (op.kind) {
    case op_kind::all_reduce: {
      std::vector<unsigned char> all(bytes * static_cast<std::size_t>(n));
      throw_on(MPI_Allgather(op.send, ibytes, MPI_BYTE, all.data(), ibytes, MPI_BYTE, op.comm->mpi), op);
      if (op.dtype == ncclFloat32) ring_sum<float>(all.data(), op.recv, op.count, n);
      else if (op.dtype == ncclFloat16) ring_sum<__half>(all.data(), op.recv, op.count, n);
      else ring_sum<__nv_bfloat16>(all.data(), op.recv, op.count, n);
      return;
    }
    case op_kind::all_gather: {
      auto* slot = static_cast<unsigned char*>(op.recv) + bytes * static_cast<std::size_t>(op.comm->rank);
      if (op.send == slot)
        throw_on(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.recv, ibytes, MPI_BYTE, op.comm->mpi), op);
      else
        throw_on(MPI_Allgather(op.send, ibytes, MPI_BYTE, op.recv, ibytes, MPI_BYTE, op.comm->mpi), op);
      return;
    }
    case op_kind::broadcast:
      if (op.comm->rank == op.root && op.send != op.recv) std::memcpy(op.recv, op.send, bytes);
      throw_on(MPI_Bcast(op.recv, ibytes, MPI_BYTE, op.root, op.comm->mpi), op);
      return;
    case op_kind::send:
    case op_kind::recv:
      return;  // run_ops posts these
  }
}

}  // namespace cudasim::nccl
