// C++ side of the plugin boundary: write a class, get the C table.
//
//   class MyAttention {
//    public:
//     static constexpr const char* kName = "attention.mine";
//     static constexpr const char* kVersion = "1.0.0";
//     static constexpr const char* kDescription = "...";
//     static constexpr const char* kCapabilities = R"({"kv_dtypes":["f32"]})";
//     static bool supports(const llmk_attention_desc& desc, std::string& why);
//     explicit MyAttention(const llmk_attention_desc& desc);  // may throw
//     void kv_layout(llmk_kv_layout& layout) const;
//     size_t plan(const llmk_attention_step& step);           // workspace bytes
//     void run(const llmk_attention_layer& layer, void* workspace, size_t workspace_size, void* stream);
//     size_t workspace_bound() const;  // optional (API 3.1): the most plan() asks for
//   };
//   LLMK_EXPORT_ATTENTION_PLUGIN(MyAttention)
//
// Linear plugins provide supports/ctor(const llmk_linear_desc&)/
// workspace_bytes(uint32_t rows) const/forward(const void* x, void* y,
// uint32_t rows, void* workspace, void* stream)/weight_bytes() const; a CPU
// F32 plugin (cpu_f32_linear) reads x and y as float and ignores the stream.
// KV allocators provide supports/ctor(const llmk_kv_allocator_desc&) and
// reserve/extend/fork/free_seq/commit_tokens/block_table/block_size/usage
// with the C signatures minus self and err; reserve/extend/fork return an
// llmk_status (LLMK_ERR_NO_SPACE is an answer, not an exception). A prefix
// cache also provides uint32_t cached_blocks(uint64_t* hashes, uint32_t max)
// const (API 2.1; returns how many there are) and reports its changes to
// the desc's event_sink, and uint32_t flush_cache() (API 2.2; drops the
// cached blocks no sequence references, returns how many). Optional:
// truncate_seq (2.3) and evict_tokens (2.4), with the C signatures minus
// self and err, returning nothing.
//
// Communicators provide supports/ctor(const llmk_comm_desc&) (the world),
// rank(int32_t& rank, int32_t& size) const, split(color, key) returning a
// new Impl*, all_reduce/all_gather/broadcast/send/recv/group_start/group_end/
// barrier with the C signatures minus self and err, and abort(code).
//
// Proposers provide supports/ctor(const llmk_proposer_desc&),
// propose(const llmk_propose_batch&) (fills each drafts[i]) and
// release(uint64_t seq_id).
//
// A plugin built against an older minor of a kind's API defines
// LLMK_<KIND>_API_BUILD_MINOR before including this header; the table then
// has that minor's fields and version.
//
// Exceptions never cross the boundary: plugin::Error carries a status, any
// other std::exception becomes LLMK_ERR_INTERNAL, both with their message.
#pragma once

#include <boost/dll/alias.hpp>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "llmk_attention.h"
#include "llmk_comm.h"
#include "llmk_kv_allocator.h"
#include "llmk_linear.h"
#include "llmk_plugin.h"
#include "llmk_proposer.h"

namespace llmk::plugin {

class Error : public std::runtime_error {
 public:
  Error(llmk_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  llmk_status status() const noexcept { return status_; }

 private:
  llmk_status status_;
};

inline void set_error(llmk_error* err, int status, const char* message) {
  if (err == nullptr) return;
  err->status = status;
  std::snprintf(err->message, sizeof(err->message), "%s", message);
}

// A device's name for messages: "cpu", "cuda", or its number.
inline std::string device_text(uint32_t device) {
  return device == LLMK_DEVICE_CPU ? "cpu" : device == LLMK_DEVICE_CUDA ? "cuda" : "device " + std::to_string(device);
}

// A linear layer's device and activation dtype (a desc from before they
// existed, with a smaller struct_size, means CPU and F32). false with the
// reason unless they are what a CPU plugin serves: CPU, F32.
inline bool cpu_f32_linear(const llmk_linear_desc& d, std::string& why) {
  const bool has_fields = d.struct_size >= offsetof(llmk_linear_desc, activation_dtype) + sizeof(uint32_t);
  const uint32_t device = has_fields ? d.device : static_cast<uint32_t>(LLMK_DEVICE_CPU);
  const uint32_t activations = has_fields ? d.activation_dtype : static_cast<uint32_t>(LLMK_DTYPE_F32);
  if (device != LLMK_DEVICE_CPU) {
    why = "this plugin runs on the CPU, the desc names " + device_text(device);
    return false;
  }
  if (activations != LLMK_DTYPE_F32) {
    why = "activation dtype " + std::to_string(activations) + " is not f32";
    return false;
  }
  return true;
}

// Runs fn, turning exceptions into a status and message.
template <class Fn>
int guarded(llmk_error* err, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const Error& e) {
    set_error(err, e.status(), e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_error(err, LLMK_ERR_OUT_OF_MEMORY, "out of memory");
    return LLMK_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(err, LLMK_ERR_INTERNAL, e.what());
    return LLMK_ERR_INTERNAL;
  } catch (...) {
    set_error(err, LLMK_ERR_INTERNAL, "unknown exception");
    return LLMK_ERR_INTERNAL;
  }
}

template <class Impl, class Desc>
int supports_thunk(const Desc* desc, char* why, size_t why_len) noexcept {
  std::string reason;
  bool ok = false;
  try {
    ok = Impl::supports(*desc, reason);
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (!ok && why != nullptr && why_len > 0) std::snprintf(why, why_len, "%s", reason.c_str());
  return ok ? 1 : 0;
}

template <class Impl, class Desc>
void* create_thunk(const Desc* desc, llmk_error* err) noexcept {
  void* self = nullptr;
  guarded(err, [&] {
    self = new Impl(*desc);
    return LLMK_OK;
  });
  return self;
}

template <class Impl>
void destroy_thunk(void* self) noexcept {
  delete static_cast<Impl*>(self);
}

template <class Impl>
const llmk_plugin_info* make_info(llmk_plugin_kind kind, uint32_t api_version, const void* api) {
  static const llmk_plugin_info info{LLMK_PLUGIN_ABI_VERSION, sizeof(llmk_plugin_info),
                                     static_cast<uint32_t>(kind), api_version, Impl::kName,
                                     Impl::kVersion, Impl::kDescription, Impl::kCapabilities, api};
  return &info;
}

#if LLMK_ATTENTION_API_BUILD_MINOR >= 1
// The table's workspace_bound: the class's when it declares one, else NULL.
template <class Impl>
constexpr auto attention_workspace_bound() {
  using Fn = int (*)(const void*, size_t*, llmk_error*);
  if constexpr (requires(const Impl& impl) { impl.workspace_bound(); }) {
    return static_cast<Fn>([](const void* self, size_t* bytes, llmk_error* err) noexcept -> int {
      return guarded(err, [&] {
        *bytes = static_cast<const Impl*>(self)->workspace_bound();
        return static_cast<int>(LLMK_OK);
      });
    });
  } else {
    return static_cast<Fn>(nullptr);
  }
}
#endif

template <class Impl>
const llmk_plugin_info* attention_info() {
  static const llmk_attention_api api{
      LLMK_ATTENTION_API_VERSION, sizeof(llmk_attention_api),
      &supports_thunk<Impl, llmk_attention_desc>, &create_thunk<Impl, llmk_attention_desc>,
      &destroy_thunk<Impl>,
      [](const void* self, llmk_kv_layout* layout, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          llmk_kv_layout out{};
          out.struct_size = sizeof(out);
          static_cast<const Impl*>(self)->kv_layout(out);
          *layout = out;
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, const llmk_attention_step* step, size_t* workspace_bytes, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          *workspace_bytes = static_cast<Impl*>(self)->plan(*step);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, const llmk_attention_layer* layer, void* workspace, size_t workspace_size, void* stream,
         llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->run(*layer, workspace, workspace_size, stream);
          return static_cast<int>(LLMK_OK);
        });
      }
#if LLMK_ATTENTION_API_BUILD_MINOR >= 1
      ,
      attention_workspace_bound<Impl>()
#endif
  };
  return make_info<Impl>(LLMK_PLUGIN_ATTENTION, LLMK_ATTENTION_API_VERSION, &api);
}

template <class Impl>
const llmk_plugin_info* linear_info() {
  static const llmk_linear_api api{
      LLMK_LINEAR_API_VERSION, sizeof(llmk_linear_api), &supports_thunk<Impl, llmk_linear_desc>,
      &create_thunk<Impl, llmk_linear_desc>, &destroy_thunk<Impl>,
      [](const void* self, uint32_t rows, size_t* bytes, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          *bytes = static_cast<const Impl*>(self)->workspace_bytes(rows);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, const void* x, void* y, uint32_t rows, void* workspace, size_t workspace_size, void* stream,
         llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          const size_t need = static_cast<const Impl*>(self)->workspace_bytes(rows);
          if (workspace_size < need || (need > 0 && workspace == nullptr))
            throw Error(LLMK_ERR_INVALID_ARGUMENT, "forward of " + std::to_string(rows) + " rows needs a " +
                                                       std::to_string(need) + "-byte workspace, got " +
                                                       std::to_string(workspace_size));
          static_cast<Impl*>(self)->forward(x, y, rows, workspace, stream);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](const void* self, size_t* bytes, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          *bytes = static_cast<const Impl*>(self)->weight_bytes();
          return static_cast<int>(LLMK_OK);
        });
      }};
  return make_info<Impl>(LLMK_PLUGIN_LINEAR, LLMK_LINEAR_API_VERSION, &api);
}

#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 1
// The table's cached_blocks: the class's when it declares one, else NULL.
template <class Impl>
constexpr auto kv_allocator_cached_blocks() {
  using Fn = int (*)(const void*, uint64_t*, uint32_t, uint32_t*, llmk_error*);
  if constexpr (requires(const Impl& impl, uint64_t* hashes) { impl.cached_blocks(hashes, 0u); }) {
    return static_cast<Fn>(
        [](const void* self, uint64_t* hashes, uint32_t max_blocks, uint32_t* num_blocks, llmk_error* err) noexcept
        -> int {
          return guarded(err, [&] {
            *num_blocks = static_cast<const Impl*>(self)->cached_blocks(hashes, max_blocks);
            return static_cast<int>(LLMK_OK);
          });
        });
  } else {
    return static_cast<Fn>(nullptr);
  }
}
#endif

#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 2
// The table's flush_cache: the class's when it declares one, else NULL.
template <class Impl>
constexpr auto kv_allocator_flush_cache() {
  using Fn = int (*)(void*, uint32_t*, llmk_error*);
  if constexpr (requires(Impl& impl) { impl.flush_cache(); }) {
    return static_cast<Fn>([](void* self, uint32_t* num_dropped, llmk_error* err) noexcept -> int {
      return guarded(err, [&] {
        *num_dropped = static_cast<Impl*>(self)->flush_cache();
        return static_cast<int>(LLMK_OK);
      });
    });
  } else {
    return static_cast<Fn>(nullptr);
  }
}
#endif

#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 3
// The table's truncate_seq: the class's when it declares one, else NULL.
template <class Impl>
constexpr auto kv_allocator_truncate_seq() {
  using Fn = int (*)(void*, uint64_t, uint32_t, llmk_error*);
  if constexpr (requires(Impl& impl) { impl.truncate_seq(uint64_t{}, uint32_t{}); }) {
    return static_cast<Fn>([](void* self, uint64_t seq_id, uint32_t num_tokens, llmk_error* err) noexcept -> int {
      return guarded(err, [&] {
        static_cast<Impl*>(self)->truncate_seq(seq_id, num_tokens);
        return static_cast<int>(LLMK_OK);
      });
    });
  } else {
    return static_cast<Fn>(nullptr);
  }
}
#endif

#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 4
// The table's evict_tokens: the class's when it declares one, else NULL.
template <class Impl>
constexpr auto kv_allocator_evict_tokens() {
  using Fn = int (*)(void*, uint64_t, uint32_t, uint32_t, llmk_kv_copy*, uint32_t, uint32_t*, llmk_error*);
  if constexpr (requires(Impl& impl, llmk_kv_copy* copies, uint32_t* num_copies) {
                  impl.evict_tokens(uint64_t{}, uint32_t{}, uint32_t{}, copies, uint32_t{}, num_copies);
                }) {
    return static_cast<Fn>([](void* self, uint64_t seq_id, uint32_t first, uint32_t num_tokens, llmk_kv_copy* copies,
                              uint32_t max_copies, uint32_t* num_copies, llmk_error* err) noexcept -> int {
      return guarded(err, [&] {
        static_cast<Impl*>(self)->evict_tokens(seq_id, first, num_tokens, copies, max_copies, num_copies);
        return static_cast<int>(LLMK_OK);
      });
    });
  } else {
    return static_cast<Fn>(nullptr);
  }
}
#endif

template <class Impl>
const llmk_plugin_info* kv_allocator_info() {
  static const llmk_kv_allocator_api api{
      LLMK_KV_ALLOCATOR_API_VERSION,
      sizeof(llmk_kv_allocator_api),
      &supports_thunk<Impl, llmk_kv_allocator_desc>,
      &create_thunk<Impl, llmk_kv_allocator_desc>,
      &destroy_thunk<Impl>,
      [](void* self, const llmk_kv_reserve_args* args, uint32_t* num_cached, llmk_error* err) noexcept -> int {
        return guarded(err, [&] { return static_cast<int>(static_cast<Impl*>(self)->reserve(*args, num_cached)); });
      },
      [](void* self, uint64_t seq_id, uint32_t num_tokens, llmk_kv_copy* copies, uint32_t max_copies,
         uint32_t* num_copies, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          return static_cast<int>(
              static_cast<Impl*>(self)->extend(seq_id, num_tokens, copies, max_copies, num_copies));
        });
      },
      [](void* self, uint64_t parent, uint64_t child, llmk_error* err) noexcept -> int {
        return guarded(err, [&] { return static_cast<int>(static_cast<Impl*>(self)->fork(parent, child)); });
      },
      [](void* self, uint64_t seq_id, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->free_seq(seq_id);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n, llmk_error* err) noexcept
      -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->commit_tokens(seq_id, first, tokens, n);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](const void* self, uint64_t seq_id, int32_t* entries, uint32_t max_entries, uint32_t* num_entries,
         llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          *num_entries = static_cast<const Impl*>(self)->block_table(seq_id, entries, max_entries);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](const void* self, uint32_t* block_size, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          *block_size = static_cast<const Impl*>(self)->block_size();
          return static_cast<int>(LLMK_OK);
        });
      },
      [](const void* self, llmk_kv_usage* out, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<const Impl*>(self)->usage(*out);
          return static_cast<int>(LLMK_OK);
        });
      }
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 1
      ,
      kv_allocator_cached_blocks<Impl>()
#endif
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 2
      ,
      kv_allocator_flush_cache<Impl>()
#endif
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 3
      ,
      kv_allocator_truncate_seq<Impl>()
#endif
#if LLMK_KV_ALLOCATOR_API_BUILD_MINOR >= 4
      ,
      kv_allocator_evict_tokens<Impl>()
#endif
  };
  return make_info<Impl>(LLMK_PLUGIN_KV_ALLOCATOR, LLMK_KV_ALLOCATOR_API_VERSION, &api);
}

template <class Impl>
const llmk_plugin_info* comm_info() {
  static const llmk_comm_api api{
      LLMK_COMM_API_VERSION,
      sizeof(llmk_comm_api),
      &supports_thunk<Impl, llmk_comm_desc>,
      &create_thunk<Impl, llmk_comm_desc>,
      &destroy_thunk<Impl>,
      [](const void* self, int32_t* rank, int32_t* size, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<const Impl*>(self)->rank(*rank, *size);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, int32_t color, int32_t key, void** out, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          *out = static_cast<Impl*>(self)->split(color, key);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, const void* send, void* recv, uint64_t count, uint32_t dtype, uint32_t op, void* queue,
         llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->all_reduce(send, recv, count, dtype, op, queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, const void* send, void* recv, uint64_t count, uint32_t dtype, void* queue,
         llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->all_gather(send, recv, count, dtype, queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, void* buf, uint64_t count, uint32_t dtype, int32_t root, void* queue, llmk_error* err) noexcept
      -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->broadcast(buf, count, dtype, root, queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, const void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* queue,
         llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->send(buf, count, dtype, peer, queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, void* buf, uint64_t count, uint32_t dtype, int32_t peer, void* queue, llmk_error* err) noexcept
      -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->recv(buf, count, dtype, peer, queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->group_start();
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, void* queue, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->group_end(queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, void* queue, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->barrier(queue);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, int32_t code) noexcept {
        try {
          static_cast<Impl*>(self)->abort(code);
        } catch (...) {
        }
      }};
  return make_info<Impl>(LLMK_PLUGIN_COMM, LLMK_COMM_API_VERSION, &api);
}

template <class Impl>
const llmk_plugin_info* proposer_info() {
  static const llmk_proposer_api api{
      LLMK_PROPOSER_API_VERSION,
      sizeof(llmk_proposer_api),
      &supports_thunk<Impl, llmk_proposer_desc>,
      &create_thunk<Impl, llmk_proposer_desc>,
      &destroy_thunk<Impl>,
      [](void* self, const llmk_propose_batch* batch, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->propose(*batch);
          return static_cast<int>(LLMK_OK);
        });
      },
      [](void* self, uint64_t seq_id, llmk_error* err) noexcept -> int {
        return guarded(err, [&] {
          static_cast<Impl*>(self)->release(seq_id);
          return static_cast<int>(LLMK_OK);
        });
      }};
  return make_info<Impl>(LLMK_PLUGIN_PROPOSER, LLMK_PROPOSER_API_VERSION, &api);
}

}  // namespace llmk::plugin

#define LLMK_DETAIL_EXPORT_PLUGIN(Impl, info_fn)                                                  \
  namespace llmk_plugin_export {                                                                  \
  extern "C" const llmk_plugin_info* llmk_plugin_entry_impl() { return ::llmk::plugin::info_fn<Impl>(); } \
  }                                                                                               \
  BOOST_DLL_ALIAS(llmk_plugin_export::llmk_plugin_entry_impl, llmk_plugin_entry)

#define LLMK_EXPORT_ATTENTION_PLUGIN(Impl) LLMK_DETAIL_EXPORT_PLUGIN(Impl, attention_info)
#define LLMK_EXPORT_LINEAR_PLUGIN(Impl) LLMK_DETAIL_EXPORT_PLUGIN(Impl, linear_info)
#define LLMK_EXPORT_KV_ALLOCATOR_PLUGIN(Impl) LLMK_DETAIL_EXPORT_PLUGIN(Impl, kv_allocator_info)
#define LLMK_EXPORT_COMM_PLUGIN(Impl) LLMK_DETAIL_EXPORT_PLUGIN(Impl, comm_info)
#define LLMK_EXPORT_PROPOSER_PLUGIN(Impl) LLMK_DETAIL_EXPORT_PLUGIN(Impl, proposer_info)
