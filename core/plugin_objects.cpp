// The RAII objects over a plugin's C table (core/plugin_loader.hpp): every
// call's status becomes an Error(plugin) naming the plugin and the call.
#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/plugin_api_version.hpp"
#include "core/plugin_loader.hpp"

namespace llmk {

namespace {

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
  // A plugin older than 3.2 would read past sink_tokens and ignore it.
  if (desc.sink_tokens > 0 && LLMK_API_VERSION_MINOR(plugin_.info().api_version) < 2)
    throw Error(ErrorCode::plugin, "plugin '" + plugin_.info().name + "' implements attention API " +
                                       api_version_text(plugin_.info().api_version) +
                                       ", attention sinks (kv_cache.sink_tokens) need 3.2");
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

std::optional<size_t> AttentionImpl::workspace_bound() const {
  if (plugin_.attention().workspace_bound == nullptr) return std::nullopt;
  llmk_error err = blank_error();
  size_t bytes = 0;
  const int status = plugin_.attention().workspace_bound(self_, &bytes, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "workspace_bound", status, err);
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

std::optional<std::vector<uint64_t>> KvAllocatorImpl::cached_blocks() const {
  const auto fn = plugin_.kv_allocator().cached_blocks;
  if (fn == nullptr) return std::nullopt;
  std::vector<uint64_t> hashes;
  for (;;) {  // the count first, then the hashes (nothing changes in between: one thread)
    llmk_error err = blank_error();
    uint32_t num_blocks = 0;
    const int status = fn(self_, hashes.data(), static_cast<uint32_t>(hashes.size()), &num_blocks, &err);
    if (status != LLMK_OK) throw_call_error(plugin_.info(), "cached_blocks", status, err);
    if (num_blocks <= hashes.size()) {
      hashes.resize(num_blocks);
      return hashes;
    }
    hashes.resize(num_blocks);
  }
}

uint32_t KvAllocatorImpl::flush_cache() {
  const auto fn = plugin_.kv_allocator().flush_cache;
  if (fn == nullptr) return 0;
  llmk_error err = blank_error();
  uint32_t num_dropped = 0;
  const int status = fn(self_, &num_dropped, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "flush_cache", status, err);
  return num_dropped;
}

void KvAllocatorImpl::truncate_seq(uint64_t seq_id, uint32_t num_tokens) {
  const auto fn = plugin_.kv_allocator().truncate_seq;
  if (fn == nullptr) return KvAllocator::truncate_seq(seq_id, num_tokens);  // throws
  llmk_error err = blank_error();
  const int status = fn(self_, seq_id, num_tokens, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "truncate_seq", status, err);
}

void KvAllocatorImpl::evict_tokens(uint64_t seq_id, uint32_t first, uint32_t num_tokens, uint32_t length,
                                   std::vector<llmk_kv_copy>& copies_out) {
  const auto fn = plugin_.kv_allocator().evict_tokens;
  if (fn == nullptr) return KvAllocator::evict_tokens(seq_id, first, num_tokens, length, copies_out);  // throws
  // The room the API promises: length / num_tokens + 2 + the live sequences.
  std::vector<llmk_kv_copy> copies(length / std::max<uint32_t>(num_tokens, 1) + 2 + usage().num_seqs);
  uint32_t num_copies = 0;
  llmk_error err = blank_error();
  const int status =
      fn(self_, seq_id, first, num_tokens, copies.data(), static_cast<uint32_t>(copies.size()), &num_copies, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "evict_tokens", status, err);
  if (num_copies > copies.size())
    throw Error(ErrorCode::plugin, "plugin '" + plugin_.info().name + "' evict_tokens reported " +
                                       std::to_string(num_copies) + " copies, more than the " +
                                       std::to_string(copies.size()) + " allowed");
  copies_out.insert(copies_out.end(), copies.begin(), copies.begin() + num_copies);
}

llmk_kv_usage KvAllocatorImpl::usage() const {
  llmk_kv_usage u{};
  llmk_error err = blank_error();
  const int status = plugin_.kv_allocator().usage(self_, &u, &err);
  if (status != LLMK_OK) throw_call_error(plugin_.info(), "usage", status, err);
  return u;
}

}  // namespace llmk
