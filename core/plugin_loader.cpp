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
#include "core/plugin_api_version.hpp"

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
std::optional<std::string> open_plugin(const fs::path& file, const Expectation& want, PluginInfo& info,
                                       std::shared_ptr<const void>& api, std::shared_ptr<LoadedLibrary>& library) {
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
    return std::string("kind is ") + plugin_kind_name(raw->kind) + ", expected " + plugin_kind_name(*want.kind);
  }
  if (want.name && name != *want.name) return "plugin info names '" + name + "', expected '" + *want.name + "'";
  if (auto refusal = adopt_api_table(raw->kind, raw->api_version, raw->api, api)) return refusal;

  info.name = name;
  info.version = str_or_empty(raw->version);
  info.description = str_or_empty(raw->description);
  info.capabilities = raw->capabilities ? raw->capabilities : "{}";
  info.kind = static_cast<llmk_plugin_kind>(raw->kind);
  info.abi_version = raw->abi_version;
  info.api_version = raw->api_version;
  info.file = file;
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

}  // namespace

const llmk_attention_api& Plugin::attention() const {
  if (info_.kind != LLMK_PLUGIN_ATTENTION || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not an attention plugin");
  }
  return *static_cast<const llmk_attention_api*>(api_.get());
}

const llmk_linear_api& Plugin::linear() const {
  if (info_.kind != LLMK_PLUGIN_LINEAR || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not a linear plugin");
  }
  return *static_cast<const llmk_linear_api*>(api_.get());
}

const llmk_kv_allocator_api& Plugin::kv_allocator() const {
  if (info_.kind != LLMK_PLUGIN_KV_ALLOCATOR || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not a kv_allocator plugin");
  }
  return *static_cast<const llmk_kv_allocator_api*>(api_.get());
}

const llmk_comm_api& Plugin::comm() const {
  if (info_.kind != LLMK_PLUGIN_COMM || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not a comm plugin");
  }
  return *static_cast<const llmk_comm_api*>(api_.get());
}

const llmk_proposer_api& Plugin::proposer() const {
  if (info_.kind != LLMK_PLUGIN_PROPOSER || api_ == nullptr) {
    throw Error(ErrorCode::plugin, "plugin '" + info_.name + "' is not a proposer plugin");
  }
  return *static_cast<const llmk_proposer_api*>(api_.get());
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
      throw Error(ErrorCode::plugin, "plugin '" + name + "' is a " + plugin_kind_name(plugin.info().kind) +
                                         " plugin, expected " + plugin_kind_name(expected_kind));
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
      std::shared_ptr<const void> api;
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

Plugin PluginRegistry::load_file(const fs::path& file) {
  const std::string fname = file.filename().string();
  const CpuIsaLevel* level = fname.rfind("libllmk_", 0) == 0 && fname.size() > 11 && fname.ends_with(".so")
                                 ? level_of_file(fname)
                                 : nullptr;
  if (level == nullptr)
    throw Error(ErrorCode::plugin, file.string() + ": not a plugin file name (libllmk_<kind>_<impl>[.<cpu level>].so)");
  if (const std::string lacks = cpu_isa_missing_text(*level); !lacks.empty())
    throw Error(ErrorCode::plugin, file.string() + ": CPU level " + cpu_isa_display_name(*level) +
                                       ", this CPU lacks " + lacks);
  Plugin plugin;
  auto reason = open_plugin(file, Expectation{}, plugin.info_, plugin.api_, plugin.library_);
  if (!reason && file_name_for(plugin.info_.name, *level) != fname)
    reason = "plugin info names '" + plugin.info_.name + "', which would live in " +
             file_name_for(plugin.info_.name, *level);
  if (reason) throw Error(ErrorCode::plugin, file.string() + ": " + *reason);
  plugin.info_.isa = cpu_isa_display_name(*level);
  return plugin;
}

bool plugin_serves_device(const PluginInfo& info, std::string_view device) {
  const auto caps = nlohmann::json::parse(info.capabilities, nullptr, false);
  if (!caps.is_object() || !caps.contains("devices") || !caps["devices"].is_array()) return device == "cpu";
  for (const auto& d : caps["devices"])
    if (d.is_string() && d.get<std::string>() == device) return true;
  return false;
}

}  // namespace llmk
