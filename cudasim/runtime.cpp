// The CUDA runtime subset, with the toolkit's own declarations
// (cuda_runtime_api.h). Device memory is host memory, tracked so that copies
// in the wrong direction and frees of unknown pointers fail as on a GPU.
// When stream work runs (queued until waited for, or at once) is streams.cpp's.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <unordered_map>

#include "internal.hpp"

namespace cudasim::detail {
namespace {

cudaError_t g_last_error = cudaSuccess;
std::string g_error_detail;
std::size_t g_total_bytes = std::size_t{80} << 30;
std::size_t g_allocated_bytes = 0;
std::map<std::uintptr_t, std::size_t> g_host_allocations;    // pinned
std::unordered_map<const void*, int> g_max_dynamic_smem;     // per kernel (cudaFuncSetAttribute)
std::uint64_t g_num_launches = 0;
int g_device = 0;
int g_cc_major = 9, g_cc_minor = 0;  // the compute capability reported (set_compute_capability)

constexpr std::size_t default_dynamic_smem_limit = 48 * 1024;
constexpr std::size_t optin_dynamic_smem_limit = 227 * 1024;

cudaError_t fail(cudaError_t code, const std::string& detail) {
  set_error(code, detail);
  return code;
}

}  // namespace

// A failed kernel (a launch failure, an illegal address, too much shared
// memory found when it ran) is reported again
// by every synchronisation, as a GPU's context errors are.
cudaError_t sticky_error() {
  return g_last_error == cudaErrorLaunchFailure || g_last_error == cudaErrorIllegalAddress ||
                 g_last_error == cudaErrorLaunchOutOfResources
             ? g_last_error
             : cudaSuccess;
}

bool is_pinned_range(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_host_allocations.upper_bound(a);
  if (it == g_host_allocations.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

namespace {

cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  const bool dst_device = is_device_range(dst, bytes), src_device = is_device_range(src, bytes);
  const bool ok = kind == cudaMemcpyHostToHost     ? !dst_device && !src_device
                  : kind == cudaMemcpyHostToDevice ? dst_device && !src_device
                  : kind == cudaMemcpyDeviceToHost ? !dst_device && src_device
                  : kind == cudaMemcpyDeviceToDevice ? dst_device && src_device
                                                     : kind == cudaMemcpyDefault;
  if (!ok)
    return fail(cudaErrorInvalidValue, "cudaMemcpy of " + std::to_string(bytes) + " bytes: the pointers (" +
                                           (src_device ? "device" : "host") + " -> " +
                                           (dst_device ? "device" : "host") + ") do not match the copy kind " +
                                           std::to_string(static_cast<int>(kind)));
  return cudaSuccess;
}

}  // namespace

void set_error(cudaError_t code, const std::string& detail) {
  g_last_error = code;
  g_error_detail = detail;
}

// Static plus dynamic shared memory against the device's limits: 48 KiB of
// static at most, 48 KiB in all unless cudaFuncSetAttribute raised the
// kernel's dynamic limit, then up to the opt-in maximum in all. Checked after
// the launch ran, from the static bytes it touched ("" when within them).
std::string shared_memory_excess(const launch_config& config, std::size_t static_bytes) {
  const std::size_t total = static_bytes + config.dynamic_smem_bytes;
  const bool opted_in = g_max_dynamic_smem.count(config.func) > 0;
  const std::string sizes = std::to_string(static_bytes) + " bytes of static shared memory + " +
                            std::to_string(config.dynamic_smem_bytes) + " dynamic = " + std::to_string(total);
  if (static_bytes > default_dynamic_smem_limit)
    return std::to_string(static_bytes) + " bytes of static shared memory, above the " +
           std::to_string(default_dynamic_smem_limit) + " a device allows (use dynamic shared memory)";
  if (!opted_in && total > default_dynamic_smem_limit)
    return sizes + ", above the " + std::to_string(default_dynamic_smem_limit) +
           " a kernel gets without cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)";
  if (total > optin_dynamic_smem_limit)
    return sizes + ", above the device's " + std::to_string(optin_dynamic_smem_limit) + " per block";
  return {};
}

void launch(const launch_config& config, std::function<void()> body) {
  const dim3 b = config.block, g = config.grid;
  const std::uint64_t num_threads = std::uint64_t{b.x} * b.y * b.z;
  // More than 1024 threads per block: cudaErrorInvalidValue, as the CUDA
  // 13.0 runtime answered on an H200; the other shapes keep
  // cudaErrorInvalidConfiguration (not yet seen on a GPU).
  if (num_threads > 1024) {
    set_error(cudaErrorInvalidValue, std::string("kernel '") + config.name + "': " + std::to_string(num_threads) +
                                         " threads per block, more than 1024");
    return;
  }
  if (num_threads == 0 || b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535) {
    set_error(cudaErrorInvalidConfiguration, std::string("kernel '") + config.name + "': invalid grid or block size");
    return;
  }
  auto limit_it = g_max_dynamic_smem.find(config.func);
  const std::size_t limit =
      limit_it == g_max_dynamic_smem.end() ? default_dynamic_smem_limit : static_cast<std::size_t>(limit_it->second);
  if (config.dynamic_smem_bytes > limit) {
    set_error(cudaErrorInvalidValue, std::string("kernel '") + config.name + "' asks for " +
                                         std::to_string(config.dynamic_smem_bytes) +
                                         " bytes of dynamic shared memory, above its limit of " +
                                         std::to_string(limit) + " (cudaFuncSetAttribute raises it)");
    return;
  }
  auto run = [config, body = std::move(body)]() {
    ++g_num_launches;
    try {
      run_kernel(config, body);
    } catch (const std::exception& e) {
      set_error(cudaErrorLaunchFailure, std::string("kernel '") + config.name + "': " + e.what());
      std::fprintf(stderr, "cudasim: %s\n", g_error_detail.c_str());
      return;
    }
    if (const std::string excess = shared_memory_excess(config, static_shared_bytes_in_launch()); !excess.empty()) {
      set_error(cudaErrorLaunchOutOfResources, std::string("kernel '") + config.name + "': " + excess);
      std::fprintf(stderr, "cudasim: %s\n", g_error_detail.c_str());
    } else if (bounds_errors_in_launch() > 0) {
      set_error(cudaErrorIllegalAddress, std::to_string(bounds_errors_in_launch()) +
                                             " out-of-bounds global access(es); first: " + first_bounds_error_in_launch());
      std::fprintf(stderr, "cudasim: %s\n", g_error_detail.c_str());
    } else if (races_in_launch() > 0 && get_race_mode() == race_mode::fail) {
      set_error(cudaErrorLaunchFailure, std::to_string(races_in_launch()) + " shared-memory race(s); first: " +
                                            first_race_text_in_launch());
      std::fprintf(stderr, "cudasim: %s\n", g_error_detail.c_str());
    }
  };
  enqueue(config.stream, std::move(run));
}

}  // namespace cudasim::detail

namespace cudasim {

std::string last_error_detail() { return detail::g_error_detail; }
void set_device_memory_bytes(std::size_t total_bytes) { detail::g_total_bytes = total_bytes; }
void set_compute_capability(int major, int minor) {
  detail::g_cc_major = major;
  detail::g_cc_minor = minor;
}
std::uint64_t num_launches() { return detail::g_num_launches; }

}  // namespace cudasim

using cudasim::detail::fail;
using namespace cudasim::detail;

extern "C" {

// ---- memory ---------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return fail(cudaErrorInvalidValue, "cudaMalloc: null output pointer");
  if (size > g_total_bytes - g_allocated_bytes)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(size) + " bytes: out of simulated memory");
  void* p = device_allocate(size);
  if (!p) return fail(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(size) + " bytes: the simulated device's address range is full");
  std::memset(p, 0xcd, size);  // device memory starts with garbage
  g_allocated_bytes += size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  flush_all();  // cudaFree waits for the device
  std::size_t bytes = 0;
  if (!device_free(ptr, &bytes)) return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  g_allocated_bytes -= bytes;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (!ptr) return fail(cudaErrorInvalidValue, "cudaMallocHost: null output pointer");
  void* p = std::aligned_alloc(256, (std::max<std::size_t>(size, 1) + 255) / 256 * 256);
  if (!p) return fail(cudaErrorMemoryAllocation, "cudaMallocHost: allocation failed");
  g_host_allocations[reinterpret_cast<std::uintptr_t>(p)] = size;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int) { return cudaMallocHost(ptr, size); }

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  flush_all();
  auto it = g_host_allocations.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == g_host_allocations.end()) return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaMallocHost did not return");
  g_host_allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free) *free = g_total_bytes - g_allocated_bytes;
  if (total) *total = g_total_bytes;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (cudaError_t e = check_copy(dst, src, count, kind)) return e;
  enqueue_copy(dst, src, count, stream);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, nullptr);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidPitchValue, "cudaMemcpy2D: width exceeds a pitch");
  for (size_t r = 0; r < height; ++r)
    if (cudaError_t e = cudaMemcpyAsync(static_cast<char*>(dst) + r * dpitch,
                                        static_cast<const char*>(src) + r * spitch, width, kind, stream))
      return e;
  return cudaSuccess;
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!is_device_range(ptr, count))
    return fail(cudaErrorInvalidValue, "cudaMemset of " + std::to_string(count) + " bytes outside any device allocation");
  enqueue(stream, [=] { std::memset(ptr, value, count); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) { return cudaMemsetAsync(ptr, value, count, nullptr); }

// __constant__ and __device__ variables are ordinary globals in the simulation.
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset, cudaMemcpyKind) {
  flush_all();
  std::memcpy(static_cast<char*>(const_cast<void*>(symbol)) + offset, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, cudaMemcpyKind) {
  flush_all();
  std::memcpy(dst, static_cast<const char*>(symbol) + offset, count);
  return cudaSuccess;
}

// ---- device, kernels, errors ------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null output pointer");
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): the simulation has one device");
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue, "cudaGetDevice: null output pointer");
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null output pointer");
  if (device != 0) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: the simulation has one device");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "cudasim (CPU simulation, H100-like limits)");
  prop->totalGlobalMem = g_total_bytes;
  prop->sharedMemPerBlock = default_dynamic_smem_limit;
  prop->sharedMemPerBlockOptin = optin_dynamic_smem_limit;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = g_cc_major;
  prop->minor = g_cc_minor;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->l2CacheSize = 50 * 1024 * 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value || device != 0) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: bad argument");
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = g_cc_major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = g_cc_minor; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(default_dynamic_smem_limit); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(optin_dynamic_smem_limit); return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string(attr) + " is not simulated");
  }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // hints only
  if (value < 0 || static_cast<std::size_t>(value) > optin_dynamic_smem_limit)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) + " bytes of dynamic shared memory exceed the device's " +
                                           std::to_string(optin_dynamic_smem_limit));
  g_max_dynamic_smem[func] = value;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define CUDASIM_NAME(e) \
  case e:               \
    return #e;
    CUDASIM_NAME(cudaSuccess)
    CUDASIM_NAME(cudaErrorInvalidValue)
    CUDASIM_NAME(cudaErrorMemoryAllocation)
    CUDASIM_NAME(cudaErrorInvalidConfiguration)
    CUDASIM_NAME(cudaErrorInvalidPitchValue)
    CUDASIM_NAME(cudaErrorInvalidDevice)
    CUDASIM_NAME(cudaErrorInvalidResourceHandle)
    CUDASIM_NAME(cudaErrorLaunchFailure)
    CUDASIM_NAME(cudaErrorIllegalAddress)
    CUDASIM_NAME(cudaErrorLaunchOutOfResources)
    CUDASIM_NAME(cudaErrorStreamCaptureUnsupported)
    CUDASIM_NAME(cudaErrorIllegalState)
    CUDASIM_NAME(cudaErrorNoDevice)
    CUDASIM_NAME(cudaErrorInsufficientDriver)
    CUDASIM_NAME(cudaErrorNotReady)
#undef CUDASIM_NAME
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorIllegalState: return "the operation is not permitted in the current state";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
  }
}

}  // extern "C"
