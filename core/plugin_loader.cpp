// Plugin discovery and loading with Boost.DLL. Every check runs before the
// plugin's tables are used; a rejected file is unloaded at once and the reason
// kept for the error message.
#include "core/plugin_loader.hpp"

#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <link.h>

#include <boost/dll/shared_library.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "core/error.hpp"

namespace llmk {

class LoadedLibrary {
 public:
  explicit LoadedLibrary(boost::dll::shared_library lib) : lib_(std::move(lib)) {}
  const boost::dll::shared_library& lib() const { return lib_; }

 private:
  boost::dll::shared_library lib_;
};

namespace {

namespace fs = std::filesystem;

#define LLMK_STRINGIFY2(x) #x
#define LLMK_STRINGIFY(x) LLMK_STRINGIFY2(x)
constexpr const char* kEntrySymbol = LLMK_STRINGIFY(LLMK_PLUGIN_ENTRY_SYMBOL);

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case LLMK_PLUGIN_ATTENTION: return "attention";
    case LLMK_PLUGIN_LINEAR: return "linear";
    case LLMK_PLUGIN_KV_ALLOCATOR: return "kv_allocator";
  }
  return "unknown";
}

uint32_t expected_api_version(uint32_t kind) {
  switch (kind) {
    case LLMK_PLUGIN_ATTENTION: return LLMK_ATTENTION_API_VERSION;
    case LLMK_PLUGIN_LINEAR: return LLMK_LINEAR_API_VERSION;
    case LLMK_PLUGIN_KV_ALLOCATOR: return LLMK_KV_ALLOCATOR_API_VERSION;
  }
  return 0;
}

// The API table's own header (every kind's table starts with these two).
struct ApiHeader {
  uint32_t api_version;
  uint32_t struct_size;
};

size_t expected_table_size(uint32_t kind) {
  switch (kind) {
    case LLMK_PLUGIN_ATTENTION: return sizeof(llmk_attention_api);
    case LLMK_PLUGIN_LINEAR: return sizeof(llmk_linear_api);
    case LLMK_PLUGIN_KV_ALLOCATOR: return sizeof(llmk_kv_allocator_api);
  }
  return 0;
}

// Every function pointer of the kind's table is set (the host calls them all).
bool table_complete(uint32_t kind, const void* api) {
  if (kind == LLMK_PLUGIN_ATTENTION) {
    auto* t = static_cast<const llmk_attention_api*>(api);
    return t->supports && t->create && t->destroy && t->kv_layout && t->plan && t->run;
  }
  if (kind == LLMK_PLUGIN_LINEAR) {
    auto* t = static_cast<const llmk_linear_api*>(api);
    return t->supports && t->create && t->destroy && t->workspace_bytes && t->forward && t->weight_bytes;
  }
  auto* t = static_cast<const llmk_kv_allocator_api*>(api);
  return t->supports && t->create && t->destroy && t->reserve && t->extend && t->fork && t->free_seq &&
         t->commit_tokens && t->block_table && t->block_size && t->usage;
}

std::string str_or_empty(const char* s) { return s ? s : ""; }

// dlopen's own message: Boost.DLL reports only a generic error code.
std::string dlopen_reason(const fs::path& file) {
  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle != nullptr) {
    dlclose(handle);
    return "failed to load";
  }
  const char* msg = dlerror();
  return msg ? msg : "failed to load";
}

// Paths of every shared object mapped in the process now.
std::set<std::string> loaded_objects() {
  std::set<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')
          static_cast<std::set<std::string>*>(out)->insert(info->dlpi_name);
        return 0;
      },
      &names);
  return names;
}

// Runtime libraries a plugin pulls in (OpenMP, oneDNN, a BLAS) start worker
// threads and per-thread state that outlive any one plugin: unmapping them
// when the plugin unloads would leave those threads running freed code. They
// stay resident for the life of the process; the plugin's own code still
// unloads with its last owner.
void pin_new_dependencies(const std::set<std::string>& before, const fs::path& plugin_file) {
  std::error_code ec;
  const fs::path plugin = fs::weakly_canonical(plugin_file, ec);
  for (const std::string& name : loaded_objects()) {
    if (before.count(name) != 0) continue;
    if (fs::weakly_canonical(fs::path(name), ec) == plugin) continue;
    dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  }
}

struct Expectation {
  std::optional<std::string> name;  // checked when set
  std::optional<uint32_t> kind;
};

// Loads one file and checks it. Returns the reason it was rejected, or
// nothing with info, api and library filled.
std::optional<std::string> open_plugin(const fs::path& file, const Expectation& want,
                                              PluginInfo& info, const void*& api,
                                              std::shared_ptr<LoadedLibrary>& library) {
  std::error_code exists_ec;
  if (!fs::exists(file, exists_ec)) return std::string("no such file");
  boost::dll::shared_library lib;
  boost::dll::fs::error_code ec;
  const std::set<std::string> before = loaded_objects();
  lib.load(file, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local, ec);
  if (ec || !lib.is_loaded()) return dlopen_reason(file);
  pin_new_dependencies(before, file);
  if (!lib.has(kEntrySymbol)) return std::string("no entry symbol '") + kEntrySymbol + "' (not an llmk plugin)";
  auto& entry = lib.get_alias<const llmk_plugin_info*()>(kEntrySymbol);
  const llmk_plugin_info* raw = entry();
  if (raw == nullptr) return std::string("entry point returned no plugin info");
  // abi_version is the first field: readable whatever the plugin's struct layout.
  if (raw->abi_version != LLMK_PLUGIN_ABI_VERSION) {
    return "ABI version " + std::to_string(raw->abi_version) + ", engine expects " +
           std::to_string(LLMK_PLUGIN_ABI_VERSION);
  }
  if (raw->struct_size < sizeof(llmk_plugin_info) || raw->struct_size > 65536) {
    return "plugin info struct_size " + std::to_string(raw->struct_size) + " is not sane (engine's is " +
           std::to_string(sizeof(llmk_plugin_info)) + ")";
  }
  const std::string name = str_or_empty(raw->name);
  if (name.empty()) return std::string("plugin info has no name");
  if (want.kind && raw->kind != *want.kind) {
    return std::string("kind is ") + kind_name(raw->kind) + ", expected " + kind_name(*want.kind);
  }
  if (want.name && name != *want.name) return "plugin info names '" + name + "', expected '" + *want.name + "'";
  const uint32_t want_api = expected_api_version(raw->kind);
  if (want_api == 0) return "unknown plugin kind " + std::to_string(raw->kind);
  if (raw->api_version != want_api) {
    return std::string(kind_name(raw->kind)) + " API version " + std::to_string(raw->api_version) +
           ", engine expects " + std::to_string(want_api);
  }
  if (raw->api == nullptr) return std::string("plugin info has no API table");
  auto* header = static_cast<const ApiHeader*>(raw->api);
  if (header->api_version != want_api) {
    return "API table version " + std::to_string(header->api_version) + ", engine expects " +
           std::to_string(want_api);
  }
  if (header->struct_size < expected_table_size(raw->kind) || header->struct_size > 65536) {
    return "API table struct_size " + std::to_string(header->struct_size) + " is not sane (engine's is " +
           std::to_string(expected_table_size(raw->kind)) + ")";
  }
  if (!table_complete(raw->kind, raw->api)) return std::string("API table has null function pointers");

  info.name = name;
  info.version = str_or_empty(raw->version);
  info.description = str_or_empty(raw->description);
  info.capabilities = raw->capabilities ? raw->capabilities : "{}";
  info.kind = static_cast<llmk_plugin_kind>(raw->kind);
  info.abi_version = raw->abi_version;
  info.api_version = raw->api_version;
  info.file = file;
  api = raw->api;
  library = std::make_shared<LoadedLibrary>(std::move(lib));
  return std::nullopt;
}

std::string file_name_for(const std::string& plugin_name, const CpuIsaLevel& level) {
  std::string stem = plugin_name;
  std::replace(stem.begin(), stem.end(), '.', '_');
  return "libllmk_" + stem + (level.name.empty() ? "" : "." + std::string(level.name)) + ".so";
}

// The CPU level a plugin file name carries: libllmk_<stem>.<level>.so, or
// the baseline for libllmk_<stem>.so. Nothing for a level this build does
// not know.
const CpuIsaLevel* level_of_file(const std::string& file_name) {
  const std::string middle = file_name.substr(8, file_name.size() - 8 - 3);  // between "libllmk_" and ".so"
  const size_t dot = middle.rfind('.');
  if (dot == std::string::npos) return &cpu_isa_levels().back();
  const std::string_view suffix = std::string_view(middle).substr(dot + 1);
  for (const auto& level : cpu_isa_levels())
    if (!level.name.empty() && level.name == suffix) return &level;
  return nullptr;
}

void add_dir(std::vector<fs::path>& dirs, const fs::path& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec).lexically_normal();
  if (ec) abs = dir;
  if (std::find(dirs.begin(), dirs.end(), abs) == dirs.end()) dirs.push_back(abs);
}

std::string status_name(int status) {
  switch (status) {
    case LLMK_OK: return "ok";
    case LLMK_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LLMK_ERR_UNSUPPORTED: return "unsupported";
    case LLMK_ERR_OUT_OF_MEMORY: return "out of memory";
    case LLMK_ERR_NO_SPACE: return "no space";
    case LLMK_ERR_INTERNAL: return "internal error";
  }
  return "status " + std::to_string(status);
}

[[noreturn]] void throw_call_error(const PluginInfo& info, const char* what, int status, const llmk_error& err) {
  std::string msg = "plugin '" + info.name + "' " + what + " failed (" + status_name(status) + ")";
  if (err.message[0] != '\0') msg += ": " + std::string(err.message);
  throw Error(ErrorCode::plugin, msg);
}

llmk_error blank_error() {
  llmk_error err{};
  err.status = LLMK_OK;
  err.message[0] = '\0';
  return err;
}

}  // namespace

const llmk_attention_api& Plugin::attention() const {
  if (info_.kind != LLMK_PLUGIN_ATTENTION || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not an attention plugin");
  }
  return *static_cast<const llmk_attention_api*>(api_);
}

const llmk_linear_api& Plugin::linear() const {
  if (info_.kind != LLMK_PLUGIN_LINEAR || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not a linear plugin");
  }
  return *static_cast<const llmk_linear_api*>(api_);
}

const llmk_kv_allocator_api& Plugin::kv_allocator() const {
  if (info_.kind != LLMK_PLUGIN_KV_ALLOCATOR || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not a kv_allocator plugin");
  }
  return *static_cast<const llmk_kv_allocator_api*>(api_);
}

PluginRegistry::PluginRegistry(std::vector<fs::path> extra_search_path) {
  if (const char* env = std::getenv("LLMK_PLUGIN_PATH")) {
    std::stringstream ss(env);
    std::string dir;
    while (std::getline(ss, dir, ':')) add_dir(search_path_, dir);
  }
  for (const auto& dir : extra_search_path) add_dir(search_path_, dir);
#ifdef LLMK_PLUGIN_BUILD_DIR
  add_dir(search_path_, LLMK_PLUGIN_BUILD_DIR);
#endif
#ifdef LLMK_PLUGIN_INSTALL_DIR
  add_dir(search_path_, LLMK_PLUGIN_INSTALL_DIR);
#endif
}

Plugin PluginRegistry::load(const std::string& name, llmk_plugin_kind expected_kind) {
  return load_from(name, expected_kind, name, cpu_isa_candidates());
}

Plugin PluginRegistry::load(const std::string& name, llmk_plugin_kind expected_kind, const std::string& isa) {
  const CpuIsaLevel& level = cpu_isa_level(isa);
  if (const std::string missing = cpu_isa_missing_text(level); !missing.empty()) {
    throw Error(ErrorCode::plugin, "plugin '" + name + "' at CPU level " + cpu_isa_display_name(level) +
                                       ": this CPU lacks " + missing);
  }
  return load_from(name, expected_kind, name + "@" + cpu_isa_display_name(level), {&level});
}

Plugin PluginRegistry::load_from(const std::string& name, llmk_plugin_kind expected_kind, const std::string& cache_key,
                                 const std::vector<const CpuIsaLevel*>& levels) {
  for (const auto& [loaded_name, plugin] : loaded_) {
    if (loaded_name != cache_key) continue;
    if (plugin.info().kind != expected_kind) {
      throw Error(ErrorCode::plugin, "plugin '" + name + "' is a " + kind_name(plugin.info().kind) +
                                         " plugin, expected " + kind_name(expected_kind));
    }
    return plugin;
  }
  std::vector<std::string> tried;
  bool any_file = false;
  for (const auto& dir : search_path_) {
    for (const CpuIsaLevel* level : levels) {
      const fs::path file = dir / file_name_for(name, *level);
      Plugin plugin;
      auto reason = open_plugin(file, Expectation{name, static_cast<uint32_t>(expected_kind)}, plugin.info_,
                                plugin.api_, plugin.library_);
      if (!reason) {
        plugin.info_.isa = cpu_isa_display_name(*level);
        for (const auto& t : tried) spdlog::warn("plugin '{}': skipped {}", name, t);
        spdlog::debug("plugin '{}' {} (CPU level {}) loaded from {}", name, plugin.info_.version, plugin.info_.isa,
                      file.string());
        loaded_.emplace_back(cache_key, plugin);
        return plugin;
      }
      // A directory without a higher level's file is the usual case: only a
      // missing baseline file (or an asked-for level's) counts as tried.
      if (*reason == "no such file" && !level->name.empty() && levels.size() > 1) continue;
      if (*reason != "no such file") any_file = true;
      tried.push_back(file.string() + " (" + *reason + ")");
    }
  }
  std::string msg = "plugin '" + name + "' " + (any_file ? "could not be loaded" : "not found") + "; tried: ";
  for (size_t i = 0; i < tried.size(); ++i) msg += (i ? ", " : "") + tried[i];
  if (tried.empty()) msg += "no directories (the search path is empty)";
  throw Error(ErrorCode::plugin, msg);
}

std::vector<PluginRegistry::Found> PluginRegistry::discover() {
  std::vector<Found> found;
  for (const auto& dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string fname = entry.path().filename().string();
      if (fname.rfind("libllmk_", 0) == 0 && fname.size() > 11 && fname.ends_with(".so")) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      Found f;
      f.info.file = file;
      const CpuIsaLevel* level = level_of_file(file.filename().string());
      if (level == nullptr) {
        f.error = "the file name's CPU level is not one this build knows";
        found.push_back(std::move(f));
        continue;
      }
      f.info.isa = cpu_isa_display_name(*level);
      f.cpu_lacks = cpu_isa_missing_text(*level);
      if (!f.cpu_lacks.empty()) {  // never opened: its code may not run here
        found.push_back(std::move(f));
        continue;
      }
      const void* api = nullptr;
      std::shared_ptr<LoadedLibrary> library;
      auto reason = open_plugin(file, Expectation{}, f.info, api, library);
      if (!reason && file_name_for(f.info.name, *level) != file.filename().string()) {
        reason = "plugin info names '" + f.info.name + "', which would live in " + file_name_for(f.info.name, *level);
      }
      if (reason) {
        f.info.file = file;
        f.error = *reason;
      }
      found.push_back(std::move(f));
    }
  }
  return found;
}

bool plugin_serves_device(const PluginInfo& info, std::string_view device) {
  const auto caps = nlohmann::json::parse(info.capabilities, nullptr, false);
  if (!caps.is_object() || !caps.contains("devices") || !caps["devices"].is_array()) return device == "cpu";
  for (const auto& d : caps["devices"])
    if (d.is_string() && d.get<std::string>() == device) return true;
  return false;
}

// ---- RAII wrappers ------------------------------------------------------------

namespace {

template <class Api, class Desc>
void* create_checked(const PluginInfo& info, const Api& api, const Desc& desc) {
  char why[512] = {0};
  if (!api.supports(&desc, why, sizeof(why))) {
    throw Error(ErrorCode::plugin, "plugin '" + info.name + "' cannot serve this configuration: " +
                                       (why[0] ? why : "no reason given"));
  }
  llmk_error err = blank_error();
  void* self = api.create(&desc, &err);
  if (self == nullptr) throw_call_error(info, "create", err.status == LLMK_OK ? LLMK_ERR_INTERNAL : err.status, err);
  return self;
}

}  // namespace

AttentionImpl::AttentionImpl(Plugin plugin, const llmk_attention_desc& desc) : plugin_(std::move(plugin)) {
  self_ = create_checked(plugin_.info(), plugin_.attention(), desc);
}

AttentionImpl::~AttentionImpl() {
  if (self_) plugin_.attention().destroy(self_);
}

llmk_kv_layout AttentionImpl::kv_layout() const {
  llmk_error err = blank_error();
  llmk_kv_layout layout{};
  layout.struct_size = sizeof(layout);
  const int status = plugin_.attention().kv_layout(self_, &layout, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "kv_layout", status, err);
  if (layout.alignment == 0 || (layout.alignment & (layout.alignment - 1)) != 0 || layout.k_bytes_per_slot == 0 ||
      layout.v_bytes_per_slot == 0)
    throw Error(ErrorCode::plugin, "plugin '" + plugin_.info().name +
                                       "' declared an unusable KV layout (K/V bytes per slot must be positive, the "
                                       "alignment a power of two)");
  return layout;
}

size_t AttentionImpl::plan(const llmk_attention_step& step) {
  llmk_error err = blank_error();
  size_t bytes = 0;
  const int status = plugin_.attention().plan(self_, &step, &bytes, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "plan", status, err);
  return bytes;
}

void AttentionImpl::run(const llmk_attention_layer& layer, void* workspace, size_t workspace_size, void* stream) {
  llmk_error err = blank_error();
  const int status = plugin_.attention().run(self_, &layer, workspace, workspace_size, stream, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "run", status, err);
}

LinearImpl::LinearImpl(Plugin plugin, const llmk_linear_desc& desc, std::shared_ptr<LinearWorkspace> workspace)
    : plugin_(std::move(plugin)), workspace_(workspace ? std::move(workspace) : std::make_shared<LinearWorkspace>()) {
  self_ = create_checked(plugin_.info(), plugin_.linear(), desc);
  llmk_error err = blank_error();
  size_t bytes = 0;
  const int status = plugin_.linear().workspace_bytes(self_, std::max<uint32_t>(desc.max_rows, 1), &bytes, &err);
  if (status != LLMK_OK) {
    plugin_.linear().destroy(self_);
    self_ = nullptr;
    throw_call_error(plugin_.info(), "workspace_bytes", status, err);
  }
  workspace_->require(bytes);
}

LinearImpl::~LinearImpl() {
  if (self_) plugin_.linear().destroy(self_);
}

void LinearImpl::forward(const void* x, void* y, uint32_t num_rows, void* stream) {
  llmk_error err = blank_error();
  const int status =
      plugin_.linear().forward(self_, x, y, num_rows, workspace_->data(), workspace_->bytes(), stream, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "forward", status, err);
}

size_t LinearImpl::weight_bytes() const {
  llmk_error err = blank_error();
  size_t bytes = 0;
  const int status = plugin_.linear().weight_bytes(self_, &bytes, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "weight_bytes", status, err);
  return bytes;
}

KvAllocatorImpl::KvAllocatorImpl(Plugin plugin, const llmk_kv_allocator_desc& desc) : plugin_(std::move(plugin)) {
  self_ = create_checked(plugin_.info(), plugin_.kv_allocator(), desc);
  llmk_error err = blank_error();
  const int status = plugin_.kv_allocator().block_size(self_, &block_size_, &err);
  if (status != LLMK_OK) {
    plugin_.kv_allocator().destroy(self_);
    self_ = nullptr;
    throw_call_error(plugin_.info(), "block_size", status, err);
  }
}

KvAllocatorImpl::~KvAllocatorImpl() {
  if (self_) plugin_.kv_allocator().destroy(self_);
}

bool KvAllocatorImpl::reserve(const llmk_kv_reserve_args& args, uint32_t* num_cached_tokens) {
  llmk_error err = blank_error();
  uint32_t cached = 0;
  int status = plugin_.kv_allocator().reserve(self_, &args, &cached, &err);
  if (status == LLMK_ERR_NO_SPACE) return false;
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "reserve", status, err);
  if (num_cached_tokens) *num_cached_tokens = cached;
  return true;
}

bool KvAllocatorImpl::extend(uint64_t seq_id, uint32_t num_tokens, std::vector<llmk_kv_copy>& copies_out) {
  // Our allocators return at most one copy per call; room for more costs nothing.
  llmk_kv_copy copies[16];
  uint32_t num_copies = 0;
  llmk_error err = blank_error();
  int status = plugin_.kv_allocator().extend(self_, seq_id, num_tokens, copies, 16, &num_copies, &err);
  if (status == LLMK_ERR_NO_SPACE) return false;
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "extend", status, err);
  if (num_copies > 16) {
    throw Error(ErrorCode::plugin, "plugin '" + plugin_.info().name + "' extend reported " +
                                       std::to_string(num_copies) + " copies, more than the 16 allowed");
  }
  copies_out.insert(copies_out.end(), copies, copies + num_copies);
  return true;
}

bool KvAllocatorImpl::fork(uint64_t parent_id, uint64_t child_id) {
  llmk_error err = blank_error();
  int status = plugin_.kv_allocator().fork(self_, parent_id, child_id, &err);
  if (status == LLMK_ERR_NO_SPACE) return false;
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "fork", status, err);
  return true;
}

void KvAllocatorImpl::free_seq(uint64_t seq_id) {
  llmk_error err = blank_error();
  const int status = plugin_.kv_allocator().free_seq(self_, seq_id, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "free_seq", status, err);
}

void KvAllocatorImpl::commit_tokens(uint64_t seq_id, uint32_t first, const int32_t* tokens, uint32_t n) {
  llmk_error err = blank_error();
  const int status = plugin_.kv_allocator().commit_tokens(self_, seq_id, first, tokens, n, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "commit_tokens", status, err);
}

uint32_t KvAllocatorImpl::block_table(uint64_t seq_id, std::vector<int32_t>& out) const {
  const auto call = [&](int32_t* entries, uint32_t max_entries) {
    llmk_error err = blank_error();
    uint32_t num_entries = 0;
    const int status = plugin_.kv_allocator().block_table(self_, seq_id, entries, max_entries, &num_entries, &err);
    if (status != LLMK_OK) throw_call_error(plugin_.info(), "block_table", status, err);
    return num_entries;
  };
  const size_t old_size = out.size();
  const uint32_t n = call(nullptr, 0);
  out.resize(old_size + n);
  const uint32_t written = call(out.data() + old_size, n);
  out.resize(old_size + std::min(n, written));
  return std::min(n, written);
}

llmk_kv_usage KvAllocatorImpl::usage() const {
  llmk_kv_usage u{};
  llmk_error err = blank_error();
  const int status = plugin_.kv_allocator().usage(self_, &u, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "usage", status, err);
  return u;
}

}  // namespace llmk
