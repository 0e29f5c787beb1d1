// Finds, loads and checks plugin libraries (Boost.DLL), and wraps their C
// tables in RAII handles that keep the library mapped while any object made
// by it lives.
//
// Search order for plugin "attention.cpu" (file libllmk_attention_cpu.so):
// each directory of $LLMK_PLUGIN_PATH (colon-separated), then the config's
// search_path, then the build tree's plugin directory, then the installed
// plugin directory. Within a directory, the file of the highest CPU level
// this machine runs comes first (libllmk_attention_cpu.avx512bf16.so, ...,
// then the baseline file; core/cpu_isa.hpp). A failure throws Error(plugin)
// that names the plugin, every path tried and why each was rejected.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/aligned_buffer.hpp"
#include "core/cpu_isa.hpp"
#include "core/kv_allocator.hpp"
#include "plugins/api/llmk_attention.h"
#include "plugins/api/llmk_comm.h"
#include "plugins/api/llmk_kv_allocator.h"
#include "plugins/api/llmk_linear.h"
#include "plugins/api/llmk_plugin.h"
#include "plugins/api/llmk_proposer.h"

namespace llmk {

class LoadedLibrary;  // the mapped shared library (opaque)

struct PluginInfo {
  std::string name;
  std::string version;
  std::string description;
  std::string capabilities;  // JSON
  llmk_plugin_kind kind{};
  uint32_t abi_version = 0;
  uint32_t api_version = 0;  // major.minor (LLMK_API_VERSION) the plugin was built against
  std::filesystem::path file;
  std::string isa = "baseline";  // the CPU level of the file (core/cpu_isa.hpp)
};

// Whether the plugin's capabilities list `device` ("cpu", "cuda") among its
// "devices"; a plugin that lists none serves the CPU only.
bool plugin_serves_device(const PluginInfo& info, std::string_view device);

// A loaded plugin: its info and its kind's C table. Copies share the library.
class Plugin {
 public:
  const PluginInfo& info() const { return info_; }
  const llmk_attention_api& attention() const;  // throws if kind differs
  const llmk_linear_api& linear() const;
  const llmk_kv_allocator_api& kv_allocator() const;
  const llmk_comm_api& comm() const;
  const llmk_proposer_api& proposer() const;
  const std::shared_ptr<LoadedLibrary>& library() const { return library_; }

 private:
  friend class PluginRegistry;
  PluginInfo info_;
  std::shared_ptr<const void> api_;  // the host's copy of the kind's table (core/plugin_api_version.hpp)
  std::shared_ptr<LoadedLibrary> library_;
};

class PluginRegistry {
 public:
  explicit PluginRegistry(std::vector<std::filesystem::path> extra_search_path = {});
  // The directories searched, in order.
  const std::vector<std::filesystem::path>& search_path() const { return search_path_; }
  // Loads (or returns the already loaded) plugin at the highest CPU level
  // available; checks ABI and kind.
  Plugin load(const std::string& name, llmk_plugin_kind expected_kind);
  // The plugin's file of CPU level `isa` ("baseline", "avx512", ...) only;
  // throws Error(plugin) when this CPU lacks the level's features.
  Plugin load(const std::string& name, llmk_plugin_kind expected_kind, const std::string& isa);
  // Every plugin library found on the search path, one entry per file (each
  // CPU level of a plugin is a file). Files that fail to load are reported
  // with the reason; those of a level this CPU cannot run are not opened.
  struct Found {
    PluginInfo info;
    std::string error;      // empty when it loaded
    std::string cpu_lacks;  // the level's features this CPU lacks (then not opened, and no error)
    bool usable() const { return error.empty() && cpu_lacks.empty(); }
  };
  std::vector<Found> discover();
  // One plugin file, whatever its kind, outside the search path too (its
  // name must match the file's, as discovery requires); throws Error(plugin)
  // naming the file and why it was refused, or the CPU level it needs.
  Plugin load_file(const std::filesystem::path& file);

 private:
  std::vector<std::filesystem::path> search_path_;
  Plugin load_from(const std::string& name, llmk_plugin_kind expected_kind, const std::string& cache_key,
                   const std::vector<const CpuIsaLevel*>& levels);
  std::vector<std::pair<std::string, Plugin>> loaded_;  // by name, or name@level for a level asked for
};

// RAII objects made by plugins. Each holds the library alive.
class AttentionImpl {
 public:
  AttentionImpl(Plugin plugin, const llmk_attention_desc& desc);  // throws Error(plugin) with supports()' reason
  ~AttentionImpl();
  AttentionImpl(const AttentionImpl&) = delete;
  AttentionImpl& operator=(const AttentionImpl&) = delete;
  // Each throws Error(plugin) naming the plugin and the call on a non-OK status.
  llmk_kv_layout kv_layout() const;
  size_t plan(const llmk_attention_step& step);  // the workspace bytes each run() of the step needs
  // The most plan() asks for within the desc's limits; nothing when the
  // plugin declares no bound (API 3.0, or a plugin that leaves it NULL).
  std::optional<size_t> workspace_bound() const;
  void run(const llmk_attention_layer& layer, void* workspace, size_t workspace_size, void* stream = nullptr);
  const PluginInfo& info() const { return plugin_.info(); }

 private:
  Plugin plugin_;
  void* self_ = nullptr;
};

// A linear layer. Its scratch comes from `workspace`, which the layers of a
// model share (grown here to what desc.max_rows rows need); a layer made
// without one gets its own.
class LinearImpl {
 public:
  LinearImpl(Plugin plugin, const llmk_linear_desc& desc, std::shared_ptr<LinearWorkspace> workspace = nullptr);
  ~LinearImpl();
  LinearImpl(const LinearImpl&) = delete;
  LinearImpl& operator=(const LinearImpl&) = delete;
  // num_rows <= desc.max_rows; x, y in the desc's device memory and
  // activation dtype; stream: the device queue (nullptr on the CPU).
  void forward(const void* x, void* y, uint32_t num_rows, void* stream = nullptr);
  size_t weight_bytes() const;
  const PluginInfo& info() const { return plugin_.info(); }

 private:
  Plugin plugin_;
  void* self_ = nullptr;
  std::shared_ptr<LinearWorkspace> workspace_;
};

class KvAllocatorImpl final : public KvAllocator {
 public:
  KvAllocatorImpl(Plugin plugin, const llmk_kv_allocator_desc& desc);
  ~KvAllocatorImpl() override;
  KvAllocatorImpl(const KvAllocatorImpl&) = delete;
  KvAllocatorImpl& operator=(const KvAllocatorImpl&) = delete;
  bool reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) override;
  bool extend(uint64_t seq_id, uint32_t num_tokens, std::vector<llmk_kv_copy>& copies_out) override;
  bool fork(uint64_t parent_id, uint64_t child_id) override;
  void free_seq(uint64_t seq_id) override;
  void commit_tokens(uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n) override;
  uint32_t block_table(uint64_t seq_id, std::vector<int32_t>& out) const override;
  uint32_t block_size() const override { return block_size_; }
  llmk_kv_usage usage() const override;
  // The plugin's flush_cache (API 2.2); 0 when it has none (no prefix
  // cache, or built against an older minor).
  uint32_t flush_cache() override;
  // The plugin's truncate_seq (API 2.3); without it nothing can roll back.
  bool can_truncate() const override { return plugin_.kv_allocator().truncate_seq != nullptr; }
  void truncate_seq(uint64_t seq_id, uint32_t num_tokens) override;
  // The plugin's evict_tokens (API 2.4); without it no streaming window.
  bool can_evict() const override { return plugin_.kv_allocator().evict_tokens != nullptr; }
  void evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, uint32_t length,
                    std::vector<llmk_kv_copy>& copies_out) override;
  // The hashes of the blocks the prefix cache holds now (API 2.1), in no
  // particular order; nullopt when the plugin reports none (no prefix cache,
  // or built against API 2.0).
  std::optional<std::vector<uint64_t>> cached_blocks() const;
  const PluginInfo& info() const { return plugin_.info(); }

 private:
  Plugin plugin_;
  void* self_ = nullptr;
  uint32_t block_size_ = 0;  // asked once, at creation
};

}  // namespace llmk
