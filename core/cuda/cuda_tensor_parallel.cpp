#include "core/cuda/cuda_tensor_parallel.hpp"

#include <algorithm>
#include <string>

#include "kernels/cuda/rows.hpp"

namespace llmk {

CudaTensorParallel::CudaTensorParallel(std::shared_ptr<ParallelJob> job, const ModelShard& shard,
                                       const ModelRuntime& rt, int32_t vocab_size)
    : job_(std::move(job)), shard_(shard.tensor), vocab_size_(vocab_size), device_group_(job_->device_tensor_group()) {
  const size_t rows = rt.max_step_tokens, f = sizeof(float);
  head_out_ = device_buffer(rows * static_cast<size_t>(shard_.vocab_count) * f, "this rank's logits columns");
  head_padded_ = device_buffer(rows * static_cast<size_t>(shard_.vocab_chunk) * f, "this rank's logits columns");
  head_gather_ = device_buffer(rows * static_cast<size_t>(shard_.vocab_chunk * shard_.degree) * f,
                               "every rank's logits columns");
}

std::string CudaTensorParallel::describe() const {
  return "tensor rank " + std::to_string(shard_.rank) + " of " + std::to_string(shard_.degree) + " over " +
         (on_device() ? device_group_->info().name : job_->tensor_group().info().name + " (host copies)");
}

void CudaTensorParallel::all_reduce(float* data, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (on_device()) {
    device_group_->all_reduce(data, data, static_cast<size_t>(count), DType::f32, stream);
    return;
  }
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  host_send_.resize(static_cast<size_t>(count));
  check_cuda(cudaMemcpyAsync(host_send_.data(), data, bytes, cudaMemcpyDeviceToHost, stream),
             "copying partial sums to the host");
  check_cuda(cudaStreamSynchronize(stream), "waiting for the partial sums");
  job_->tensor_group().all_reduce(host_send_.data(), static_cast<size_t>(count));
  check_cuda(cudaMemcpyAsync(data, host_send_.data(), bytes, cudaMemcpyHostToDevice, stream),
             "copying the sums back to the device");
  // The staging vector is rewritten by the next call: the copy must be done.
  check_cuda(cudaStreamSynchronize(stream), "waiting for the sums");
}

void CudaTensorParallel::all_gather(const float* send, float* recv, int64_t count, cudaStream_t stream) {
  if (on_device()) {
    device_group_->all_gather(send, recv, static_cast<size_t>(count), DType::f32, stream);
    return;
  }
  const size_t n = static_cast<size_t>(count);
  host_send_.resize(n);
  host_recv_.resize(n * static_cast<size_t>(shard_.degree));
  check_cuda(cudaMemcpyAsync(host_send_.data(), send, n * sizeof(float), cudaMemcpyDeviceToHost, stream),
             "copying logits columns to the host");
  check_cuda(cudaStreamSynchronize(stream), "waiting for the logits columns");
  job_->tensor_group().all_gather(host_send_.data(), host_recv_.data(), n, DType::f32);
  check_cuda(cudaMemcpyAsync(recv, host_recv_.data(), host_recv_.size() * sizeof(float), cudaMemcpyHostToDevice,
                             stream),
             "copying every rank's logits columns to the device");
  check_cuda(cudaStreamSynchronize(stream), "waiting for the logits columns");
}

void CudaTensorParallel::gather_logits(int64_t rows, float* logits, cudaStream_t stream) {
  if (rows == 0) return;
  const int64_t chunk = shard_.vocab_chunk;
  const auto num_rows = static_cast<int32_t>(rows);
  // Every rank sends rows of `chunk` columns (the last rank's tail unused).
  check_cuda(cuda::copy_rows(head_out(), shard_.vocab_count, head_padded_.f32(), chunk, num_rows,
                             static_cast<int32_t>(shard_.vocab_count), stream),
             "padding the logits columns");
  all_gather(head_padded_.f32(), head_gather_.f32(), rows * chunk, stream);
  if (shard_.rank != 0) return;
  for (int32_t r = 0; r < shard_.degree; ++r) {
    const int64_t first = r * chunk, count = std::min<int64_t>(chunk, vocab_size_ - first);
    check_cuda(cuda::copy_rows(head_gather_.f32() + r * rows * chunk, chunk, logits + first, vocab_size_, num_rows,
                               static_cast<int32_t>(count), stream),
               "assembling the logits");
  }
}

void CudaTensorParallel::local_ids(std::vector<int32_t>& ids) const {
  const int64_t first = shard_.vocab_first, end = shard_.vocab_first + shard_.vocab_count;
  for (int32_t& id : ids) id = id >= first && id < end ? static_cast<int32_t>(id - first) : -1;
}

}  // namespace llmk
