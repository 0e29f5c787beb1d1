// Attention API 3.1's workspace_bound from the helper's side: a class that
// declares one gets it in its table, and the attention check holds every
// plan() to it. The class forwards to attention.cpu.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "conformance/attention_check.hpp"
#include "core/plugin_loader.hpp"
#include "plugins/api/plugin_helpers.hpp"

using namespace llmk;
using namespace llmk::conformance;

namespace {

const llmk_attention_api* g_real = nullptr;  // attention.cpu's table
size_t g_bound = 0;                          // what the class declares

class Bounded {
 public:
  static constexpr const char* kName = "attention.bounded";
  static constexpr const char* kVersion = "0.0.1";
  static constexpr const char* kDescription = "test: attention.cpu declaring a workspace bound";
  static constexpr const char* kCapabilities = R"({"kv_dtypes":["f32"],"devices":["cpu"]})";

  static bool supports(const llmk_attention_desc& desc, std::string& why) {
    char buf[512] = {};
    const bool ok = g_real->supports(&desc, buf, sizeof(buf)) == 1;
    why = buf;
    return ok;
  }
  explicit Bounded(const llmk_attention_desc& desc) {
    llmk_error err{};
    self_ = g_real->create(&desc, &err);
    if (self_ == nullptr) throw plugin::Error(static_cast<llmk_status>(err.status), err.message);
  }
  ~Bounded() { g_real->destroy(self_); }
  Bounded(const Bounded&) = delete;
  Bounded& operator=(const Bounded&) = delete;
  void kv_layout(llmk_kv_layout& layout) const {
    llmk_error err{};
    check(g_real->kv_layout(self_, &layout, &err), err);
  }
  size_t plan(const llmk_attention_step& step) {
    llmk_error err{};
    size_t bytes = 0;
    check(g_real->plan(self_, &step, &bytes, &err), err);
    return bytes;
  }
  void run(const llmk_attention_layer& layer, void* workspace, size_t workspace_size, void* stream) {
    llmk_error err{};
    check(g_real->run(self_, &layer, workspace, workspace_size, stream, &err), err);
  }
  size_t workspace_bound() const { return g_bound; }

 private:
  static void check(int status, const llmk_error& err) {
    if (status != LLMK_OK) throw plugin::Error(static_cast<llmk_status>(status), err.message);
  }
  void* self_ = nullptr;
};

}  // namespace

TEST_CASE("a class that declares workspace_bound gets it in its table, and the attention check holds plan() to it",
          "[conformance][api_version]") {
  PluginRegistry registry;
  const Plugin cpu = registry.load("attention.cpu", LLMK_PLUGIN_ATTENTION, "baseline");
  g_real = &cpu.attention();
  const auto& api = *static_cast<const llmk_attention_api*>(plugin::attention_info<Bounded>()->api);
  REQUIRE(api.workspace_bound != nullptr);
  // Prefill chunks and a decode: attention.cpu plans scratch for them.
  const AttentionProblem p{8, 2, 40, 16, {13, 5, 1}, {13, 29, 150}};

  g_bound = std::numeric_limits<size_t>::max();
  const AttentionOutcome within = check_attention_step(api, p, LLMK_DTYPE_F32, 2, 5);
  CHECK(within.why.empty());
  CHECK(within.max_err <= 2e-5);

  g_bound = 0;
  const AttentionOutcome over = check_attention_step(api, p, LLMK_DTYPE_F32, 2, 5);
  CHECK(over.max_err == std::numeric_limits<double>::infinity());
  CHECK_THAT(over.why, Catch::Contains("workspace bytes, more than the 0 its workspace_bound declares"));
}
