// A plugin kind's API version (major.minor) and the checks of its table:
// which versions the engine accepts, and the engine-sized copy of an older
// minor's smaller table that the host reads (plugins/api/llmk_plugin.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace llmk {

// "attention", "linear", "kv_allocator", "comm", "proposer" ("unknown" for
// anything else).
const char* plugin_kind_name(uint32_t kind);

// "3.1" for LLMK_API_VERSION(3, 1).
std::string api_version_text(uint32_t version);

// The engine's own API version of a plugin kind (0 for an unknown kind).
uint32_t engine_api_version(uint32_t kind);

// Why a plugin of `kind` built against `version` cannot be loaded (a
// different major, or a newer minor than the engine's), naming both
// versions; nothing when it can.
std::optional<std::string> api_version_refusal(uint32_t kind, uint32_t version);

// Checks the kind's table that a plugin built against `version` exports (its
// header, its size for that minor, every required function) and sets `table`
// to the engine-sized copy the host reads: the plugin's bytes up to its
// struct_size, every field of a later minor at its documented default (all
// optional fields default to NULL). Returns why the table is refused.
std::optional<std::string> adopt_api_table(uint32_t kind, uint32_t version, const void* api,
                                           std::shared_ptr<const void>& table);

}  // namespace llmk
