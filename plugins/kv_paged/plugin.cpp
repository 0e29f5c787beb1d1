// Exports PagedAllocator as the plugin "kv.paged".
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/kv_paged/paged_allocator.hpp"

LLMK_EXPORT_KV_ALLOCATOR_PLUGIN(llmk::kv::PagedAllocator)
