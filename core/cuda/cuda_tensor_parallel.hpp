// A tensor-parallel rank's exchanges in the CUDA executor's forward
// (core/parallel.hpp has the split): the all-reduces of the embedding and of
// o_proj's and down_proj's partial sums, and the vocabulary slices of the
// logits gathered into rank 0's logits buffer.
//
// Two transports:
//   device   the job's device tensor group (parallel.comm=comm.nccl): every
//            call is enqueued on the executor's stream and nothing waits on
//            the host, so a decode step's forward is still captured into a
//            CUDA graph (the collectives replay with it)
//   host     the job's host tensor group (parallel.comm=comm.mpi): each call
//            waits for the stream, copies the rows to the host, exchanges
//            them there and copies the result back; no graphs
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/device_memory.hpp"
#include "core/model_runtime.hpp"
#include "core/parallel.hpp"

namespace llmk {

class CudaTensorParallel {
 public:
  // Buffers for max_step_tokens logits rows of this rank's vocabulary share.
  CudaTensorParallel(std::shared_ptr<ParallelJob> job, const ModelShard& shard, const ModelRuntime& rt,
                     int32_t vocab_size);

  bool on_device() const { return device_group_ != nullptr; }
  const TensorShard& shard() const { return shard_; }
  // "tensor rank 1 of 2 over comm.nccl"
  std::string describe() const;

  // data[0, count) = the sum over the tensor group of every rank's data.
  void all_reduce(float* data, int64_t count, cudaStream_t stream);

  // Where lm_head writes its [rows, vocab_count] columns of this rank.
  float* head_out() const { return head_out_.f32(); }
  // Every rank's head_out() rows into logits [rows, vocab] on tensor rank 0
  // (device memory); other ranks' logits are left as they are.
  void gather_logits(int64_t rows, float* logits, cudaStream_t stream);

  // Token ids as rows of this rank's embedding table: -1 for the ids of the
  // other ranks' rows (the embedding kernel leaves those rows as they were).
  void local_ids(std::vector<int32_t>& ids) const;

 private:
  void all_gather(const float* send, float* recv, int64_t count, cudaStream_t stream);

  std::shared_ptr<ParallelJob> job_;
  TensorShard shard_;
  int32_t vocab_size_ = 0;
  Communicator* device_group_ = nullptr;  // null: the host transport
  cuda::DeviceBuffer head_out_;     // [max_step_tokens, vocab_count]
  cuda::DeviceBuffer head_padded_;  // [max_step_tokens, vocab_chunk]
  cuda::DeviceBuffer head_gather_;  // [degree, max_step_tokens, vocab_chunk] (rows of a step packed per rank)
  std::vector<float> host_send_, host_recv_;  // the host transport's staging
};

}  // namespace llmk
