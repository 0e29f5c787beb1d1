// The plugin loader: finds, checks and loads plugin libraries, refuses broken
// ones with a message naming every path tried and why, and keeps a library
// mapped while anything made by it lives.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "core/cpu_isa.hpp"
#include "core/error.hpp"
#include "core/plugin_loader.hpp"
#include "support/skip.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = LLMK_FIXTURE_PLUGIN_DIR;
const fs::path kPlugins = LLMK_PLUGIN_BUILD_DIR;

// Sets (or clears) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The loader's error for `name`, or "" when it loaded.
std::string load_error(llmk::PluginRegistry& registry, const std::string& name, llmk_plugin_kind kind) {
  try {
    registry.load(name, kind);
  } catch (const llmk::Error& e) {
    REQUIRE(e.code() == llmk::ErrorCode::plugin);
    return e.what();
  }
  return "";
}

bool is_mapped(const fs::path& file) {
  void* handle = dlopen(file.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

llmk_kv_allocator_desc desc(uint32_t block_size = 16) {
  return llmk_kv_allocator_desc{sizeof(llmk_kv_allocator_desc), 1024, block_size, 128, 1, "{}", nullptr, nullptr};
}

}  // namespace

TEST_CASE("the search path is LLMK_PLUGIN_PATH, then the configured directories, then the build tree",
          "[loader]") {
  ScopedEnv env("LLMK_PLUGIN_PATH", "/opt/a::/opt/b");
  llmk::PluginRegistry registry({"/opt/c", "/opt/a"});
  const auto& path = registry.search_path();
  REQUIRE(path.size() >= 4);
  CHECK(path[0] == "/opt/a");
  CHECK(path[1] == "/opt/b");
  CHECK(path[2] == "/opt/c");  // "/opt/a" again is not searched twice
  CHECK(path[3] == fs::absolute(kPlugins).lexically_normal());
}

TEST_CASE("every KV allocator plugin loads with its info", "[loader]") {
  ScopedEnv env("LLMK_PLUGIN_PATH", std::nullopt);
  llmk::PluginRegistry registry;
  for (std::string name : {"kv.contiguous", "kv.paged", "kv.vm"}) {
    CAPTURE(name);
    const llmk::Plugin plugin = registry.load(name, LLMK_PLUGIN_KV_ALLOCATOR);
    CHECK(plugin.info().name == name);
    CHECK(plugin.info().kind == LLMK_PLUGIN_KV_ALLOCATOR);
    CHECK(plugin.info().abi_version == LLMK_PLUGIN_ABI_VERSION);
    CHECK(plugin.info().api_version == LLMK_KV_ALLOCATOR_API_VERSION);
    CHECK(plugin.info().version == "1.0.0");
    CHECK_FALSE(plugin.info().description.empty());
    CHECK(plugin.info().capabilities.front() == '{');
    CHECK(plugin.info().file.filename() == "libllmk_" + name.replace(2, 1, "_") + ".so");
    CHECK(plugin.kv_allocator().api_version == LLMK_KV_ALLOCATOR_API_VERSION);
    CHECK_THROWS_AS(plugin.attention(), llmk::Error);

    llmk::KvAllocatorImpl alloc(plugin, desc());
    const int32_t tokens[3] = {5, 6, 7};
    uint32_t cached = 99;
    REQUIRE(alloc.reserve(llmk_kv_reserve_args{1, tokens, 3, 64}, &cached));
    CHECK(cached == 0);
    std::vector<int32_t> table;
    CHECK(alloc.block_table(1, table) >= 1);
    CHECK(alloc.usage().num_seqs == 1);
    CHECK(alloc.usage().used_slots == 3);
  }
  // A second load returns the same library.
  CHECK(registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR).library() ==
        registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR).library());
}

TEST_CASE("an unknown plugin is refused naming every path tried", "[loader]") {
  ScopedEnv env("LLMK_PLUGIN_PATH", "/nonexistent/dir");
  llmk::PluginRegistry registry({kFixtures});
  const std::string msg = load_error(registry, "attention.foo", LLMK_PLUGIN_ATTENTION);
  CHECK_THAT(msg, Catch::StartsWith("plugin 'attention.foo' not found; tried: "));
  CHECK_THAT(msg, Catch::Contains("/nonexistent/dir/libllmk_attention_foo.so (no such file)"));
  CHECK_THAT(msg, Catch::Contains((kFixtures / "libllmk_attention_foo.so").string() + " (no such file)"));
  CHECK_THAT(msg, Catch::Contains((fs::absolute(kPlugins).lexically_normal() / "libllmk_attention_foo.so").string()));
}

TEST_CASE("a plugin built for another ABI is refused with both versions", "[loader]") {
  llmk::PluginRegistry registry({kFixtures});
  const std::string msg = load_error(registry, "kv.badabi", LLMK_PLUGIN_KV_ALLOCATOR);
  CHECK_THAT(msg, Catch::StartsWith("plugin 'kv.badabi' could not be loaded; tried: "));
  CHECK_THAT(msg, Catch::Contains((kFixtures / "libllmk_kv_badabi.so").string() +
                                  " (ABI version 7, engine expects 1)"));
  CHECK_FALSE(is_mapped(kFixtures / "libllmk_kv_badabi.so"));  // rejected files are unloaded
}

TEST_CASE("a plugin with another kind API version is refused with both versions", "[loader]") {
  llmk::PluginRegistry registry({kFixtures});
  CHECK_THAT(load_error(registry, "kv.badapi", LLMK_PLUGIN_KV_ALLOCATOR),
             Catch::Contains("(kv_allocator API version 0.9, engine has " +
                             std::to_string(LLMK_KV_ALLOCATOR_API_MAJOR) + "." +
                             std::to_string(LLMK_KV_ALLOCATOR_API_MINOR) + " (a different major version is not compatible))"));
}

TEST_CASE("a plugin of the wrong kind is refused", "[loader]") {
  llmk::PluginRegistry registry({kFixtures});
  CHECK_THAT(load_error(registry, "kv.wrongkind", LLMK_PLUGIN_KV_ALLOCATOR),
             Catch::Contains("libllmk_kv_wrongkind.so (kind is attention, expected kv_allocator)"));
  // Asked for as what it is, the same file loads.
  CHECK(registry.load("kv.wrongkind", LLMK_PLUGIN_ATTENTION).info().kind == LLMK_PLUGIN_ATTENTION);
}

TEST_CASE("a library without the entry symbol is refused", "[loader]") {
  llmk::PluginRegistry registry({kFixtures});
  CHECK_THAT(load_error(registry, "kv.nosymbol", LLMK_PLUGIN_KV_ALLOCATOR),
             Catch::Contains("libllmk_kv_nosymbol.so (no entry symbol 'llmk_plugin_entry' (not an llmk plugin))"));
}

TEST_CASE("a plugin whose info names another plugin is refused", "[loader]") {
  llmk::PluginRegistry registry({kFixtures});
  CHECK_THAT(load_error(registry, "kv.misnamed", LLMK_PLUGIN_KV_ALLOCATOR),
             Catch::Contains("(plugin info names 'kv.somethingelse', expected 'kv.misnamed')"));
}

TEST_CASE("a plugin's refusal of a configuration reaches the caller with its reason", "[loader]") {
  llmk::PluginRegistry registry;
  const auto plugin = registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR);
  try {
    llmk::KvAllocatorImpl alloc(plugin, desc(4));
    FAIL("block_size 4 was accepted");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::plugin);
    CHECK(std::string(e.what()) ==
          "plugin 'kv.paged' cannot serve this configuration: block_size 4 is outside 8..256");
  }
  auto bad_options = desc();
  bad_options.options = R"({"hash_bitz":3})";
  CHECK_THROWS_WITH(llmk::KvAllocatorImpl(plugin, bad_options),
                    Catch::Contains("unknown option 'hash_bitz'"));
}

TEST_CASE("a plugin's error status becomes an Error carrying its message", "[loader]") {
  llmk::PluginRegistry registry;
  llmk::KvAllocatorImpl alloc(registry.load("kv.vm", LLMK_PLUGIN_KV_ALLOCATOR), desc());
  std::vector<llmk_kv_copy> copies;
  try {
    alloc.extend(42, 10, copies);
    FAIL("extending an unknown sequence succeeded");
  } catch (const llmk::Error& e) {
    CHECK(e.code() == llmk::ErrorCode::plugin);
    CHECK(std::string(e.what()) == "plugin 'kv.vm' extend failed (invalid argument): kv.vm: extend: unknown sequence 42");
  }
  // No space is an answer, not an error.
  const std::vector<int32_t> tokens(128, 1);
  for (uint64_t id = 1; id <= 8; ++id) {
    REQUIRE(alloc.reserve(llmk_kv_reserve_args{id, tokens.data(), 128, 128}, nullptr));
  }
  CHECK_FALSE(alloc.reserve(llmk_kv_reserve_args{100, tokens.data(), 1, 128}, nullptr));
}

TEST_CASE("an exception inside any KV allocator call comes back as an Error naming the plugin and the call",
          "[loader]") {
  llmk::PluginRegistry registry({kFixtures});
  llmk::KvAllocatorImpl alloc(registry.load("kv.throwing", LLMK_PLUGIN_KV_ALLOCATOR), desc());
  const auto expect_plugin_error = [](auto&& call, const std::string& message) {
    try {
      call();
      FAIL("the call returned normally");
    } catch (const llmk::Error& e) {
      CHECK(e.code() == llmk::ErrorCode::plugin);
      CHECK(std::string(e.what()) == message);
    }
  };
  expect_plugin_error([&] { alloc.free_seq(1); },
                      "plugin 'kv.throwing' free_seq failed (internal error): free_seq exploded");
  const int32_t tokens[2] = {5, 6};
  expect_plugin_error([&] { alloc.commit_tokens(1, 0, tokens, 2); },
                      "plugin 'kv.throwing' commit_tokens failed (out of memory): out of memory");
  std::vector<int32_t> table;
  expect_plugin_error([&] { alloc.block_table(1, table); },
                      "plugin 'kv.throwing' block_table failed (internal error): block_table exploded");
  expect_plugin_error([&] { (void)alloc.usage(); },
                      "plugin 'kv.throwing' usage failed (internal error): usage exploded");
  CHECK(alloc.block_size() == 16);  // asked once, at creation
}

TEST_CASE("a plugin library stays loaded while an object made by it lives", "[loader]") {
  const fs::path file = fs::absolute(kPlugins / "libllmk_kv_contiguous.so");
  REQUIRE_FALSE(is_mapped(file));
  std::optional<llmk::KvAllocatorImpl> alloc;
  {
    llmk::PluginRegistry registry;
    llmk::Plugin plugin = registry.load("kv.contiguous", LLMK_PLUGIN_KV_ALLOCATOR);
    alloc.emplace(plugin, desc());
  }  // the registry and every Plugin copy are gone
  REQUIRE(is_mapped(file));
  const int32_t tokens[2] = {1, 2};
  REQUIRE(alloc->reserve(llmk_kv_reserve_args{1, tokens, 2, 128}, nullptr));
  std::vector<llmk_kv_copy> copies;
  REQUIRE(alloc->extend(1, 5, copies));
  CHECK(alloc->usage().used_slots == 5);
  CHECK(alloc->info().name == "kv.contiguous");
  alloc.reset();
  CHECK_FALSE(is_mapped(file));  // the last owner unmapped it
}

TEST_CASE("discover lists every plugin on the path, with the reason for those that fail", "[loader]") {
  ScopedEnv env("LLMK_PLUGIN_PATH", std::nullopt);
  llmk::PluginRegistry registry({kFixtures});
  std::map<std::string, llmk::PluginRegistry::Found> by_file;
  for (auto& f : registry.discover()) by_file[f.info.file.filename().string()] = f;
  REQUIRE(by_file.count("libllmk_kv_paged.so"));
  CHECK(by_file["libllmk_kv_paged.so"].error.empty());
  CHECK(by_file["libllmk_kv_paged.so"].info.name == "kv.paged");
  CHECK(by_file["libllmk_kv_vm.so"].info.kind == LLMK_PLUGIN_KV_ALLOCATOR);
  CHECK(by_file["libllmk_kv_badabi.so"].error == "ABI version 7, engine expects 1");
  CHECK_THAT(by_file["libllmk_kv_nosymbol.so"].error, Catch::StartsWith("no entry symbol"));
  CHECK_THAT(by_file["libllmk_kv_misnamed.so"].error, Catch::Contains("kv.somethingelse"));
  CHECK(by_file["libllmk_kv_wrongkind.so"].error.empty());  // a valid attention plugin, whatever its name says
}

// ---- CPU levels (core/cpu_isa.hpp) ----

namespace {

// The level the loader should pick on this CPU, worked out from the
// compiler's own CPU probe rather than the loader's tables.
std::string best_level_here() {
  __builtin_cpu_init();
  const bool v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  if (v4 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni")) return "avx512bf16";
  if (v4) return "avx512";
  return "baseline";
}

bool build_has_cpu_levels() { return !llmk::cpu_isa_levels_built().empty(); }

}  // namespace

TEST_CASE("the loader picks the highest CPU level of a plugin that this CPU runs", "[loader][cpu_level]") {
  if (!build_has_cpu_levels()) LLMK_SKIP("this build makes one CPU level only (LLMK_CPU_DISPATCH=OFF)");
  ScopedEnv path("LLMK_PLUGIN_PATH", std::nullopt);
  ScopedEnv cap("LLMK_CPU_ISA", std::nullopt);
  llmk::PluginRegistry registry;
  for (const char* name : {"linear.int4", "linear.dense", "attention.cpu"}) {
    CAPTURE(name);
    const auto kind = std::string(name).starts_with("attention") ? LLMK_PLUGIN_ATTENTION : LLMK_PLUGIN_LINEAR;
    const llmk::Plugin plugin = registry.load(name, kind);
    const std::string want = best_level_here();
    CHECK(plugin.info().isa == want);
    const std::string suffix = want == "baseline" ? ".so" : "." + want + ".so";
    CHECK(plugin.info().file.filename().string().ends_with(suffix));
  }
}

TEST_CASE("LLMK_CPU_ISA caps the CPU level, and an unknown level is a configuration error naming the known ones",
          "[loader][cpu_level]") {
  if (!build_has_cpu_levels()) LLMK_SKIP("this build makes one CPU level only (LLMK_CPU_DISPATCH=OFF)");
  ScopedEnv path("LLMK_PLUGIN_PATH", std::nullopt);
  {
    ScopedEnv cap("LLMK_CPU_ISA", "baseline");
    llmk::PluginRegistry registry;
    const llmk::Plugin plugin = registry.load("linear.int4", LLMK_PLUGIN_LINEAR);
    CHECK(plugin.info().isa == "baseline");
    CHECK(plugin.info().file.filename() == "libllmk_linear_int4.so");
  }
  {
    ScopedEnv cap("LLMK_CPU_ISA", "avx9000");
    llmk::PluginRegistry registry;
    try {
      registry.load("linear.int4", LLMK_PLUGIN_LINEAR);
      FAIL("an unknown level loaded");
    } catch (const llmk::Error& e) {
      CHECK(e.code() == llmk::ErrorCode::invalid_config);
      CHECK_THAT(e.what(), Catch::Contains("LLMK_CPU_ISA") && Catch::Contains("avx9000") &&
                               Catch::Contains("avx512bf16") && Catch::Contains("baseline"));
    }
  }
}

TEST_CASE("a plugin file of a CPU level this CPU lacks is never opened; one it has but that is broken falls back",
          "[loader][cpu_level]") {
  if (!build_has_cpu_levels()) LLMK_SKIP("this build makes one CPU level only (LLMK_CPU_DISPATCH=OFF)");
  ScopedEnv path("LLMK_PLUGIN_PATH", std::nullopt);
  ScopedEnv cap("LLMK_CPU_ISA", std::nullopt);
  const fs::path dir = fs::temp_directory_path() / ("llmk_cpu_level_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kPlugins / "libllmk_kv_paged.so", dir / "libllmk_kv_paged.so", fs::copy_options::overwrite_existing);
  // Not a library at all: opening it can only fail.
  { std::ofstream(dir / "libllmk_kv_paged.avx512bf16.so") << "not an ELF file"; }
  const bool cpu_has_it = best_level_here() == "avx512bf16";

  llmk::PluginRegistry registry({dir});
  bool listed = false;
  for (const auto& f : registry.discover()) {
    if (f.info.file.filename() != "libllmk_kv_paged.avx512bf16.so") continue;
    listed = true;
    CHECK(f.info.isa == "avx512bf16");
    if (cpu_has_it) {
      CHECK_FALSE(f.error.empty());  // opened, and refused
    } else {
      CHECK(f.error.empty());  // not opened at all
      CHECK_THAT(f.cpu_lacks, Catch::Contains("avx512"));
    }
  }
  CHECK(listed);
  const llmk::Plugin plugin = registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR);
  CHECK(plugin.info().isa == "baseline");
  CHECK(plugin.info().file == dir / "libllmk_kv_paged.so");
  if (!cpu_has_it) {
    try {
      registry.load("kv.paged", LLMK_PLUGIN_KV_ALLOCATOR, "avx512bf16");
      FAIL("a level this CPU lacks loaded");
    } catch (const llmk::Error& e) {
      CHECK(e.code() == llmk::ErrorCode::plugin);
      CHECK_THAT(e.what(), Catch::Contains("kv.paged") && Catch::Contains("this CPU lacks") &&
                               Catch::Contains("avx512bf16"));
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("every CPU level the build makes plugin files for is one the loader knows, highest first",
          "[loader][cpu_level]") {
  const auto built = llmk::cpu_isa_levels_built();
  const auto& levels = llmk::cpu_isa_levels();
  REQUIRE(levels.size() == built.size() + 1);  // plus the baseline, last
  CHECK(levels.back().name.empty());
  for (size_t i = 0; i < built.size(); ++i) {
    CHECK(levels[i].name == built[i]);
    CHECK(&llmk::cpu_isa_level(built[i]) == &levels[i]);
  }
  // The plugins built per level really are in the build tree, one file each.
  for (const auto& level : built)
    for (const char* stem : {"attention_cpu", "linear_dense", "linear_int8", "linear_int4", "linear_uint8_zp"})
      CHECK(fs::exists(kPlugins / ("libllmk_" + std::string(stem) + "." + level + ".so")));
}
