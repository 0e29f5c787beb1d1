// Exports ContiguousAllocator as the plugin "kv.contiguous".
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/kv_contiguous/contiguous_allocator.hpp"

LLMK_EXPORT_KV_ALLOCATOR_PLUGIN(llmk::kv::ContiguousAllocator)
