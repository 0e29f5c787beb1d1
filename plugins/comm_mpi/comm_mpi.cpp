// comm.mpi: the communicator on host buffers over MPI (Open MPI from
// Debian). Every MPI call runs on the process's MPI thread (mpi_driver.hpp);
// the calls here post nonblocking operations there and wait for them with
// the liveness probes and the timeout.
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "plugins/api/plugin_helpers.hpp"
#include "plugins/comm_mpi/mpi_driver.hpp"

namespace llmk::comm {

namespace {

size_t element_bytes(uint32_t dtype) {
  switch (dtype) {
    case LLMK_DTYPE_F32:
    case LLMK_DTYPE_I32: return 4;
    case LLMK_DTYPE_F16:
    case LLMK_DTYPE_BF16: return 2;
    case LLMK_DTYPE_I8:
    case LLMK_DTYPE_U8: return 1;
  }
  throw plugin::Error(LLMK_ERR_UNSUPPORTED, "comm.mpi moves f32, f16, bf16, i8, u8 and i32 buffers, not dtype " +
                                                std::to_string(dtype));
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// MPI has no 16-bit float sums: each step of the reduction adds in f32 and
// rounds once.
void sum_f16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const _Float16*>(in);
  auto* b = static_cast<_Float16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<_Float16>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// The reduction operators, made on the MPI thread once per world.
struct Ops {
  MPI_Op f16 = MPI_OP_NULL, bf16 = MPI_OP_NULL;
};

// A buffer a call of `count` elements reads or writes.
void check_buffer(const void* buf, uint64_t count, const char* what) {
  if (buf == nullptr && count > 0)
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, std::string(what) + " is null (" + std::to_string(count) +
                                                       " elements)");
}

int checked_count(uint64_t count, const char* what) {
  if (count > static_cast<uint64_t>(INT_MAX))
    throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, std::string(what) + " of " + std::to_string(count) +
                                                       " elements: comm.mpi moves at most 2^31-1 per call");
  return static_cast<int>(count);
}

}  // namespace

class MpiComm {
 public:
  static constexpr const char* kName = "comm.mpi";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "collectives and point-to-point transfers of host buffers over MPI (Open MPI), from one MPI thread";
  static constexpr const char* kCapabilities = R"({"devices":["cpu"],"transport":"mpi"})";

  static bool supports(const llmk_comm_desc& d, std::string& why) {
    if (d.struct_size < sizeof(llmk_comm_desc)) {
      why = "desc struct_size " + std::to_string(d.struct_size) + " is smaller than llmk_comm_desc (" +
            std::to_string(sizeof(llmk_comm_desc)) + ")";
      return false;
    }
    if (d.device != LLMK_DEVICE_CPU) {
      why = "comm.mpi moves host buffers; the desc names " + plugin::device_text(d.device);
      return false;
    }
    if (!(d.timeout_s >= 0)) {
      why = "timeout_s must be 0 (never) or positive";
      return false;
    }
    return true;
  }

  // The world.
  explicit MpiComm(const llmk_comm_desc& d) : driver_(MpiDriver::acquire()), timeout_s_(d.timeout_s) {
    std::string why;
    if (!supports(d, why)) throw plugin::Error(LLMK_ERR_UNSUPPORTED, why);
    ops_ = std::make_shared<Ops>();
    driver_->run([&] {
      MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
      MPI_Op_create(&sum_f16, 1, &ops_->f16);
      MPI_Op_create(&sum_bf16, 1, &ops_->bf16);
    });
    describe();
  }

  ~MpiComm() {
    const bool world = ops_.use_count() == 1;
    driver_->run([&] {
      if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
      if (world) {
        MPI_Op_free(&ops_->f16);
        MPI_Op_free(&ops_->bf16);
      }
    });
  }

  void rank(int32_t& rank, int32_t& size) const {
    rank = rank_;
    size = size_;
  }

  MpiComm* split(int32_t color, int32_t key) {
    MPI_Comm out = MPI_COMM_NULL;
    driver_->run([&] {
      if (MPI_Comm_split(comm_, color, key, &out) != MPI_SUCCESS)
        throw plugin::Error(LLMK_ERR_INTERNAL, "MPI_Comm_split failed");
    });
    return new MpiComm(*this, out);
  }

  void all_reduce(const void* send, void* recv, uint64_t count, uint32_t dtype, uint32_t op, void* /*queue*/) {
    if (op != LLMK_REDUCE_SUM)
      throw plugin::Error(LLMK_ERR_UNSUPPORTED, "comm.mpi reduces with sum only, not op " + std::to_string(op));
    MPI_Datatype type = MPI_FLOAT;
    MPI_Op mpi_op = MPI_SUM;
    if (dtype == LLMK_DTYPE_F16 || dtype == LLMK_DTYPE_BF16) {
      type = MPI_UINT16_T;
      mpi_op = dtype == LLMK_DTYPE_F16 ? ops_->f16 : ops_->bf16;
    } else if (dtype != LLMK_DTYPE_F32) {
      throw plugin::Error(LLMK_ERR_UNSUPPORTED, "comm.mpi all-reduces f32, f16 and bf16, not dtype " +
                                                    std::to_string(dtype));
    }
    check_buffer(send, count, "all_reduce's send buffer");
    check_buffer(recv, count, "all_reduce's receive buffer");
    const int n = checked_count(count, "all_reduce");
    collective("all_reduce of " + std::to_string(count), [&](MPI_Request* r) {
      return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n, type, mpi_op, comm_, r);
    });
  }

  void all_gather(const void* send, void* recv, uint64_t count, uint32_t dtype, void* /*queue*/) {
    check_buffer(send, count, "all_gather's send buffer");
    check_buffer(recv, count, "all_gather's receive buffer");
    const int n = checked_count(count * element_bytes(dtype), "all_gather");
    // In place: this rank's part already sits at its offset of recv.
    const bool in_place = send == static_cast<const uint8_t*>(recv) + static_cast<size_t>(n) * rank_;
    collective("all_gather of " + std::to_string(count), [&](MPI_Request* r) {
      return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, r);
    });
  }

  void broadcast(void* buf, uint64_t count, uint32_t dtype, int32_t root, void* /*queue*/) {
    check_peer(root, "broadcast root");
    check_buffer(buf, count, "broadcast's buffer");
    const int n = checked_count(count * element_bytes(dtype), "broadcast");
    collective("broadcast of " + std::to_string(count) + " from rank " + std::to_string(root),
               [&](MPI_Request* r) { return MPI_Ibcast(buf, n, MPI_BYTE, root, comm_, r); });
  }

  void send(const void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* /*queue*/) {
    check_peer(peer, "send to");
    check_buffer(buf, count, "send's buffer");
    const int n = checked_count(count * element_bytes(dtype), "send");
    point_to_point("send of " + std::to_string(count) + " to rank " + std::to_string(peer), peer,
                   [&](MPI_Request* r) { return MPI_Isend(buf, n, MPI_BYTE, peer, 0, comm_, r); });
  }

  void recv(void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* /*queue*/) {
    check_peer(peer, "recv from");
    check_buffer(buf, count, "recv's buffer");
    const int n = checked_count(count * element_bytes(dtype), "recv");
    point_to_point("recv of " + std::to_string(count) + " from rank " + std::to_string(peer), peer,
                   [&](MPI_Request* r) { return MPI_Irecv(buf, n, MPI_BYTE, peer, 0, comm_, r); });
  }

  void group_start() {
    if (grouping_) throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "group_start inside a group");
    grouping_ = true;
  }

  void group_end(void* /*queue*/) {
    if (!grouping_) throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "group_end without group_start");
    grouping_ = false;
    std::vector<MPI_Request> requests = std::move(group_);
    std::vector<int> peers = std::move(group_peers_);
    group_.clear();
    group_peers_.clear();
    if (requests.empty()) return;
    driver_->run([&] { driver_->wait(requests, peers, timeout_s_, "a group of " + std::to_string(requests.size()) +
                                                                   " sends and receives"); });
  }

  void barrier(void* /*queue*/) {
    collective("barrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
  }

  void abort(int32_t code) { driver_->abort(comm_, code); }

 private:
  // A communicator split from `parent`.
  MpiComm(const MpiComm& parent, MPI_Comm comm)
      : driver_(parent.driver_), ops_(parent.ops_), comm_(comm), timeout_s_(parent.timeout_s_) {
    describe();
  }

  // Rank, size, and the world ranks of the others (whom a stuck call probes).
  void describe() {
    driver_->run([&] {
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      MPI_Comm_rank(comm_, &rank_);
      MPI_Comm_size(comm_, &size_);
      MPI_Group group, world;
      MPI_Comm_group(comm_, &group);
      MPI_Comm_group(MPI_COMM_WORLD, &world);
      std::vector<int> mine(static_cast<size_t>(size_)), theirs(static_cast<size_t>(size_));
      for (int i = 0; i < size_; ++i) mine[static_cast<size_t>(i)] = i;
      MPI_Group_translate_ranks(group, size_, mine.data(), world, theirs.data());
      MPI_Group_free(&group);
      MPI_Group_free(&world);
      for (int i = 0; i < size_; ++i)
        if (i != rank_) peers_world_.push_back(theirs[static_cast<size_t>(i)]);
      world_of_.assign(theirs.begin(), theirs.end());
    });
  }

  void check_peer(int32_t peer, const char* what) const {
    if (peer < 0 || peer >= size_)
      throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, std::string(what) + " rank " + std::to_string(peer) +
                                                         " of a communicator of " + std::to_string(size_));
  }

  template <class Post>
  void collective(const std::string& what, Post&& post) {
    if (grouping_)
      throw plugin::Error(LLMK_ERR_INVALID_ARGUMENT, "comm.mpi groups sends and receives only, not " + what);
    driver_->run([&] {
      std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
      if (post(requests.data()) != MPI_SUCCESS) throw plugin::Error(LLMK_ERR_INTERNAL, what + ": MPI refused it");
      driver_->wait(requests, peers_world_, timeout_s_, what);
    });
  }

  template <class Post>
  void point_to_point(const std::string& what, int32_t peer, Post&& post) {
    MPI_Request request = MPI_REQUEST_NULL;
    driver_->run([&] {
      if (post(&request) != MPI_SUCCESS) throw plugin::Error(LLMK_ERR_INTERNAL, what + ": MPI refused it");
      if (grouping_) return;
      std::vector<MPI_Request> one(1, request);
      driver_->wait(one, {world_of_[static_cast<size_t>(peer)]}, timeout_s_, what);
    });
    if (grouping_) {
      group_.push_back(request);
      group_peers_.push_back(world_of_[static_cast<size_t>(peer)]);
    }
  }

  std::shared_ptr<MpiDriver> driver_;
  std::shared_ptr<Ops> ops_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<int> peers_world_;  // world ranks of the other members
  std::vector<int> world_of_;     // world rank of each member
  double timeout_s_ = 0;
  bool grouping_ = false;
  std::vector<MPI_Request> group_;
  std::vector<int> group_peers_;
};

}  // namespace llmk::comm

LLMK_EXPORT_COMM_PLUGIN(llmk::comm::MpiComm)
