#include "core/plugin_api_version.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "plugins/api/llmk_attention.h"
#include "plugins/api/llmk_comm.h"
#include "plugins/api/llmk_kv_allocator.h"
#include "plugins/api/llmk_linear.h"
#include "plugins/api/llmk_plugin.h"
#include "plugins/api/llmk_proposer.h"

namespace llmk {
namespace {

// The API table's own header (every kind's table starts with these two).
struct ApiHeader {
  uint32_t api_version;
  uint32_t struct_size;
};

// Bytes of the kind's table as minor `minor` of the engine's major defined
// it: each minor appends fields, so a minor's table is the prefix up to the
// first field of the next.
size_t table_size_at_minor(uint32_t kind, uint32_t minor) {
  switch (kind) {
    case LLMK_PLUGIN_ATTENTION:
      return minor == 0 ? offsetof(llmk_attention_api, workspace_bound) : sizeof(llmk_attention_api);
    case LLMK_PLUGIN_LINEAR: return sizeof(llmk_linear_api);
    case LLMK_PLUGIN_KV_ALLOCATOR:
      return minor == 0   ? offsetof(llmk_kv_allocator_api, cached_blocks)
             : minor == 1 ? offsetof(llmk_kv_allocator_api, flush_cache)
             : minor == 2 ? offsetof(llmk_kv_allocator_api, truncate_seq)
             : minor == 3 ? offsetof(llmk_kv_allocator_api, evict_tokens)
                          : sizeof(llmk_kv_allocator_api);
    case LLMK_PLUGIN_COMM: return sizeof(llmk_comm_api);
    case LLMK_PLUGIN_PROPOSER: return sizeof(llmk_proposer_api);
  }
  return 0;
}

size_t engine_table_size(uint32_t kind) {
  return table_size_at_minor(kind, LLMK_API_VERSION_MINOR(engine_api_version(kind)));
}

// Every function the host calls unconditionally is set (optional ones, added
// by later minors, may be NULL).
bool table_complete(uint32_t kind, const void* api) {
  if (kind == LLMK_PLUGIN_ATTENTION) {
    auto* t = static_cast<const llmk_attention_api*>(api);
    return t->supports && t->create && t->destroy && t->kv_layout && t->plan && t->run;
  }
  if (kind == LLMK_PLUGIN_LINEAR) {
    auto* t = static_cast<const llmk_linear_api*>(api);
    return t->supports && t->create && t->destroy && t->workspace_bytes && t->forward && t->weight_bytes;
  }
  if (kind == LLMK_PLUGIN_COMM) {
    auto* t = static_cast<const llmk_comm_api*>(api);
    return t->supports && t->create && t->destroy && t->rank && t->split && t->all_reduce && t->all_gather &&
           t->broadcast && t->send && t->recv && t->group_start && t->group_end && t->barrier && t->abort;
  }
  if (kind == LLMK_PLUGIN_PROPOSER) {
    auto* t = static_cast<const llmk_proposer_api*>(api);
    return t->supports && t->create && t->destroy && t->propose && t->release;
  }
  auto* t = static_cast<const llmk_kv_allocator_api*>(api);
  return t->supports && t->create && t->destroy && t->reserve && t->extend && t->fork && t->free_seq &&
         t->commit_tokens && t->block_table && t->block_size && t->usage;
}

}  // namespace

const char* plugin_kind_name(uint32_t kind) {
  switch (kind) {
    case LLMK_PLUGIN_ATTENTION: return "attention";
    case LLMK_PLUGIN_LINEAR: return "linear";
    case LLMK_PLUGIN_KV_ALLOCATOR: return "kv_allocator";
    case LLMK_PLUGIN_COMM: return "comm";
    case LLMK_PLUGIN_PROPOSER: return "proposer";
  }
  return "unknown";
}

std::string api_version_text(uint32_t version) {
  return std::to_string(LLMK_API_VERSION_MAJOR(version)) + "." + std::to_string(LLMK_API_VERSION_MINOR(version));
}

uint32_t engine_api_version(uint32_t kind) {
  switch (kind) {
    case LLMK_PLUGIN_ATTENTION: return LLMK_API_VERSION(LLMK_ATTENTION_API_MAJOR, LLMK_ATTENTION_API_MINOR);
    case LLMK_PLUGIN_LINEAR: return LLMK_API_VERSION(LLMK_LINEAR_API_MAJOR, LLMK_LINEAR_API_MINOR);
    case LLMK_PLUGIN_KV_ALLOCATOR: return LLMK_API_VERSION(LLMK_KV_ALLOCATOR_API_MAJOR, LLMK_KV_ALLOCATOR_API_MINOR);
    case LLMK_PLUGIN_COMM: return LLMK_API_VERSION(LLMK_COMM_API_MAJOR, LLMK_COMM_API_MINOR);
    case LLMK_PLUGIN_PROPOSER: return LLMK_API_VERSION(LLMK_PROPOSER_API_MAJOR, LLMK_PROPOSER_API_MINOR);
  }
  return 0;
}

std::optional<std::string> api_version_refusal(uint32_t kind, uint32_t version) {
  const uint32_t engine = engine_api_version(kind);
  if (engine == 0) return "unknown plugin kind " + std::to_string(kind);
  const std::string both = std::string(plugin_kind_name(kind)) + " API version " + api_version_text(version) +
                           ", engine has " + api_version_text(engine);
  if (LLMK_API_VERSION_MAJOR(version) != LLMK_API_VERSION_MAJOR(engine))
    return both + " (a different major version is not compatible)";
  if (LLMK_API_VERSION_MINOR(version) > LLMK_API_VERSION_MINOR(engine))
    return both + " (a newer minor version than the engine's)";
  return std::nullopt;
}

std::optional<std::string> adopt_api_table(uint32_t kind, uint32_t version, const void* api,
                                           std::shared_ptr<const void>& table) {
  if (auto refusal = api_version_refusal(kind, version)) return refusal;
  if (api == nullptr) return std::string("plugin info has no API table");
  auto* header = static_cast<const ApiHeader*>(api);
  if (header->api_version != version) {
    return "API table version " + api_version_text(header->api_version) + ", plugin info says " +
           api_version_text(version);
  }
  const size_t need = table_size_at_minor(kind, LLMK_API_VERSION_MINOR(version));
  if (header->struct_size < need || header->struct_size > 65536) {
    return "API table struct_size " + std::to_string(header->struct_size) + " is not sane (API " +
           api_version_text(version) + "'s is " + std::to_string(need) + ")";
  }
  // The engine's layout, zero-filled (every optional field's default is
  // NULL), with the plugin's fields copied over.
  const size_t engine_size = engine_table_size(kind);
  auto copy = std::shared_ptr<std::byte[]>(new std::byte[engine_size]());
  std::memcpy(copy.get(), api, std::min<size_t>(header->struct_size, engine_size));
  if (!table_complete(kind, copy.get())) return std::string("API table has null function pointers");
  table = std::shared_ptr<const void>(copy, copy.get());
  return std::nullopt;
}

}  // namespace llmk
