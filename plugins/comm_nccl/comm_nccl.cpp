// comm.nccl: the communicator on CUDA device buffers through NCCL, each
// call enqueued on the caller's cudaStream_t (the `queue`).
//
// The world is the mpirun job: rank and size come from MPI_COMM_WORLD (MPI
// initialized here with MPI_THREAD_MULTIPLE unless the process already did,
// and finalized when this plugin's last communicator goes if it was); rank
// 0's ncclGetUniqueId reaches the others by MPI_Bcast, then
// ncclCommInitRank. split() is ncclCommSplit; send/recv between
// group_start and group_end are ncclSend/ncclRecv inside
// ncclGroupStart/ncclGroupEnd; barrier() is an all-reduce of one float on
// the queue; abort() is ncclCommAbort, then MPI_Abort.
//
// Device: desc.device_index, or with -1 the process's rank on its node
// (OMPI_COMM_WORLD_LOCAL_RANK) modulo the visible GPUs. NCCL refuses two
// ranks on one GPU, so a node with more ranks than GPUs is refused at
// create(), by every rank together.
//
// desc.timeout_s is not enforced: NCCL's calls only enqueue work, and a peer
// that died leaves that work waiting on the device, not in a call here.
// Noticing it (ncclCommGetAsyncError polled by the host, or a watchdog on
// the stream's progress that calls abort()) is the caller's.
//
// The same source builds against the toolkit's NCCL (the shipped plugin)
// and against the CUDA simulation's (tests/cudasim_plugins), where every
// process has a simulated GPU of its own (LLMK_COMM_NCCL_SIMULATED).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "plugins/api/plugin_helpers.hpp"

#ifndef LLMK_COMM_NCCL_SIMULATED
#define LLMK_COMM_NCCL_SIMULATED 0
#endif

namespace llmk::comm_nccl {

namespace {

using plugin::Error;

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw Error(status == cudaErrorMemoryAllocation ? LLMK_ERR_OUT_OF_MEMORY : LLMK_ERR_INTERNAL,
                what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

// The environment variable as a number, or `otherwise`.
int env_int(const char* name, int otherwise) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return otherwise;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value >= 0 && value <= INT_MAX ? static_cast<int>(value) : otherwise;
}

// MPI for the world's bootstrap, shared by every communicator of this plugin.
class MpiSession {
 public:
  static std::shared_ptr<MpiSession> acquire() {
    static std::mutex mutex;
    static std::weak_ptr<MpiSession> instance;
    std::lock_guard lock(mutex);
    if (auto existing = instance.lock()) return existing;
    std::shared_ptr<MpiSession> session(new MpiSession());
    instance = session;
    return session;
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && finalized == 0) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  MpiSession() {
    // Plugins are opened RTLD_LOCAL; Open MPI's own components resolve
    // libmpi's symbols globally, so make them global.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr)
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    int initialized = 0, provided = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        throw Error(LLMK_ERR_UNSUPPORTED, "MPI_Init_thread failed");
      owned_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (provided < MPI_THREAD_SERIALIZED && is_main == 0)
      throw Error(LLMK_ERR_UNSUPPORTED, "MPI runs at thread level " + std::to_string(provided) +
                                            " and this is not its main thread; comm.nccl calls MPI from the "
                                            "caller's thread (MPI_THREAD_SERIALIZED or more needed)");
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  }
  bool owned_ = false;
  int world_rank_ = 0, world_size_ = 1;
};

ncclDataType_t nccl_type(uint32_t dtype, const char* call) {
  switch (dtype) {
    case LLMK_DTYPE_F32: return ncclFloat32;
    case LLMK_DTYPE_F16: return ncclFloat16;
    case LLMK_DTYPE_BF16: return ncclBfloat16;
    case LLMK_DTYPE_I8: return ncclInt8;
    case LLMK_DTYPE_U8: return ncclUint8;
    case LLMK_DTYPE_I32: return ncclInt32;
    default:
      throw Error(LLMK_ERR_INVALID_ARGUMENT, std::string(call) + ": dtype " + std::to_string(dtype) +
                                                 " has no NCCL type (ggml blocks travel as u8 bytes)");
  }
}

const char* dtype_text(uint32_t dtype) {
  switch (dtype) {
    case LLMK_DTYPE_F32: return "f32";
    case LLMK_DTYPE_F16: return "f16";
    case LLMK_DTYPE_BF16: return "bf16";
    case LLMK_DTYPE_I8: return "i8";
    case LLMK_DTYPE_U8: return "u8";
    case LLMK_DTYPE_I32: return "i32";
    default: return "?";
  }
}

// The device this rank drives, or -1 with the reason in `why`.
int pick_device(const llmk_comm_desc& d, std::string& why) {
  int num_devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&num_devices);
  if (status != cudaSuccess || num_devices == 0) {
    why = std::string("no CUDA device (") + cudaGetErrorString(status) + ")";
    return -1;
  }
  if (d.device_index >= num_devices) {
    why = "device_index " + std::to_string(d.device_index) + ", but " + std::to_string(num_devices) + " GPU(s)";
    return -1;
  }
#if !LLMK_COMM_NCCL_SIMULATED
  const int ranks_here = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  if (ranks_here > num_devices) {
    why = std::to_string(ranks_here) + " ranks on this node share " + std::to_string(num_devices) +
          " GPU(s); NCCL refuses two ranks on one GPU";
    return -1;
  }
#endif
  return d.device_index >= 0 ? d.device_index : env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0) % num_devices;
}

}  // namespace

class CommNccl {
 public:
  static constexpr const char* kName = "comm.nccl";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "NCCL collectives and send/recv on CUDA device buffers, enqueued on the caller's stream; the world from "
      "MPI (mpirun), its unique id sent by MPI_Bcast";
  static constexpr const char* kCapabilities = R"({"devices":["cuda"],"transport":"nccl"})";

  static bool supports(const llmk_comm_desc& d, std::string& why) {
    if (d.struct_size < sizeof(llmk_comm_desc)) {
      why = "desc struct_size " + std::to_string(d.struct_size) + " is smaller than llmk_comm_desc (" +
            std::to_string(sizeof(llmk_comm_desc)) + ")";
      return false;
    }
    if (d.device != LLMK_DEVICE_CUDA) {
      why = "comm.nccl moves CUDA device buffers, the desc names " + plugin::device_text(d.device);
      return false;
    }
    if (d.device_index < -1) {
      why = "device_index " + std::to_string(d.device_index) + " (a GPU ordinal, or -1)";
      return false;
    }
    int num_devices = 0;
    if (cudaGetDeviceCount(&num_devices) != cudaSuccess || num_devices == 0) {
      why = "no CUDA device";
      return false;
    }
    const nlohmann::json options = nlohmann::json::parse(d.options ? d.options : "{}", nullptr, false);
    if (!options.is_object() || !options.empty()) {
      why = std::string("comm.nccl takes no options, got ") + (d.options ? d.options : "");
      return false;
    }
    return true;
  }

  // The world: every rank of the job calls this together.
  explicit CommNccl(const llmk_comm_desc& d) {
    std::string why;
    if (!supports(d, why)) throw Error(LLMK_ERR_UNSUPPORTED, why);
    mpi_ = MpiSession::acquire();
    device_ = pick_device(d, why);
    // Every rank learns whether all can join before any waits in NCCL.
    const int mine = device_ >= 0 ? INT_MAX : mpi_->world_rank();
    int first_failed = INT_MAX;
    MPI_Allreduce(&mine, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (device_ < 0) throw Error(LLMK_ERR_UNSUPPORTED, "rank " + std::to_string(mpi_->world_rank()) + ": " + why);
    if (first_failed != INT_MAX)
      throw Error(LLMK_ERR_UNSUPPORTED, "rank " + std::to_string(first_failed) + " cannot join the NCCL world (see its error)");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")");
    allocate_barrier();

    struct {
      int result;
      ncclUniqueId id;
    } root{ncclSuccess, {}};
    if (mpi_->world_rank() == 0) root.result = ncclGetUniqueId(&root.id);
    MPI_Bcast(&root, sizeof root, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (root.result != ncclSuccess)
      throw Error(LLMK_ERR_INTERNAL, std::string("ncclGetUniqueId on rank 0: ") +
                                         ncclGetErrorString(static_cast<ncclResult_t>(root.result)));
    rank_ = mpi_->world_rank();
    size_ = mpi_->world_size();
    try {
      check(ncclCommInitRank(&comm_, size_, root.id, rank_), "ncclCommInitRank");
    } catch (...) {
      cudaFree(barrier_);
      throw;
    }
  }

  ~CommNccl() {
    if (barrier_ != nullptr) cudaFree(barrier_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  CommNccl(const CommNccl&) = delete;
  CommNccl& operator=(const CommNccl&) = delete;

  void rank(int32_t& rank, int32_t& size) const {
    rank = rank_;
    size = size_;
  }

  CommNccl* split(int32_t color, int32_t key) {
    ncclComm_t out = nullptr;
    // A negative color still takes part (as no color), so that the others return.
    check(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &out, nullptr), "ncclCommSplit");
    if (color < 0) {
      if (out != nullptr) ncclCommDestroy(out);
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "split: color " + std::to_string(color) + " is negative");
    }
    return new CommNccl(mpi_, out, device_);
  }

  void all_reduce(const void* send, void* recv, uint64_t count, uint32_t dtype, uint32_t op, void* queue) {
    if (op != LLMK_REDUCE_SUM) throw Error(LLMK_ERR_INVALID_ARGUMENT, "all_reduce: op " + std::to_string(op) + " is not a sum");
    if (dtype != LLMK_DTYPE_F32 && dtype != LLMK_DTYPE_F16 && dtype != LLMK_DTYPE_BF16)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, "all_reduce: dtype " + std::to_string(dtype) + " is not f32, f16 or bf16");
    check_buffer(send, count, "all_reduce's send buffer");
    check_buffer(recv, count, "all_reduce's receive buffer");
    check(ncclAllReduce(send, recv, count, nccl_type(dtype, "all_reduce"), ncclSum, comm_, stream(queue)),
          what("all_reduce", count, dtype));
  }

  void all_gather(const void* send, void* recv, uint64_t count, uint32_t dtype, void* queue) {
    check_buffer(send, count, "all_gather's send buffer");
    check_buffer(recv, count, "all_gather's receive buffer");
    check(ncclAllGather(send, recv, count, nccl_type(dtype, "all_gather"), comm_, stream(queue)),
          what("all_gather", count, dtype));
  }

  void broadcast(void* buf, uint64_t count, uint32_t dtype, int32_t root, void* queue) {
    check_rank(root, "broadcast root");
    check_buffer(buf, count, "broadcast's buffer");
    check(ncclBroadcast(buf, buf, count, nccl_type(dtype, "broadcast"), root, comm_, stream(queue)),
          what("broadcast", count, dtype) + " from " + std::to_string(root));
  }

  void send(const void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* queue) {
    check_rank(peer, "send peer");
    check_buffer(buf, count, "send's buffer");
    check(ncclSend(buf, count, nccl_type(dtype, "send"), peer, comm_, stream(queue)),
          what("send", count, dtype) + " to " + std::to_string(peer));
  }

  void recv(void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* queue) {
    check_rank(peer, "recv peer");
    check_buffer(buf, count, "recv's buffer");
    check(ncclRecv(buf, count, nccl_type(dtype, "recv"), peer, comm_, stream(queue)),
          what("recv", count, dtype) + " from " + std::to_string(peer));
  }

  void group_start() {
    check(ncclGroupStart(), "ncclGroupStart");
    ++group_depth_;
  }
  // Each call of the group named its own queue; NCCL orders the group on those.
  void group_end(void* /*queue*/) {
    if (group_depth_ == 0) throw Error(LLMK_ERR_INVALID_ARGUMENT, "group_end without group_start");
    --group_depth_;
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void barrier(void* queue) {
    check(ncclAllReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, comm_, stream(queue)), "barrier");
  }

  void abort(int32_t code) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    MPI_Abort(MPI_COMM_WORLD, code);
  }

 private:
  // A communicator split from another (it owns `comm` from here on).
  CommNccl(std::shared_ptr<MpiSession> mpi, ncclComm_t comm, int device) : mpi_(std::move(mpi)), comm_(comm), device_(device) {
    try {
      check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
      check(ncclCommCount(comm_, &size_), "ncclCommCount");
      allocate_barrier();
    } catch (...) {
      ncclCommDestroy(comm_);
      throw;
    }
  }

  void allocate_barrier() {
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&barrier_), sizeof(float)), "cudaMalloc of the barrier's float");
    check_cuda(cudaMemset(barrier_, 0, sizeof(float)), "cudaMemset of the barrier's float");
  }

  static cudaStream_t stream(void* queue) { return static_cast<cudaStream_t>(queue); }

  std::string what(const char* call, uint64_t count, uint32_t dtype) const {
    return std::string(call) + " of " + std::to_string(count) + " " + dtype_text(dtype);
  }

  // A buffer a call of `count` elements reads or writes.
  static void check_buffer(const void* buf, uint64_t count, const char* what) {
    if (buf == nullptr && count > 0)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, std::string(what) + " is null (" + std::to_string(count) + " elements)");
  }

  void check_rank(int32_t r, const char* role) const {
    if (r < 0 || r >= size_)
      throw Error(LLMK_ERR_INVALID_ARGUMENT, std::string(role) + " " + std::to_string(r) + " is not a rank of " +
                                                 std::to_string(size_));
  }

  void check(ncclResult_t result, const std::string& call) const {
    if (result == ncclSuccess) return;
    const llmk_status status = result == ncclInvalidArgument || result == ncclInvalidUsage ? LLMK_ERR_INVALID_ARGUMENT
                               : result == ncclRemoteError                                  ? LLMK_ERR_PEER_LOST
                                                                                            : LLMK_ERR_INTERNAL;
    const char* detail = ncclGetLastError(comm_);
    throw Error(status, call + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                            ncclGetErrorString(result) + (detail != nullptr && *detail ? std::string(": ") + detail : ""));
  }

  std::shared_ptr<MpiSession> mpi_;  // released last: may finalize MPI
  ncclComm_t comm_ = nullptr;
  int device_ = -1;
  int rank_ = 0, size_ = 1;
  float* barrier_ = nullptr;  // [1] on device_, the barrier's all-reduce
  int group_depth_ = 0;       // group_start calls not yet ended
};

}  // namespace llmk::comm_nccl

LLMK_EXPORT_COMM_PLUGIN(llmk::comm_nccl::CommNccl)
