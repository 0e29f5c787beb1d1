// Exports VmAllocator as the plugin "kv.vm".
#include "plugins/api/plugin_helpers.hpp"
#include "plugins/kv_vm/vm_allocator.hpp"

LLMK_EXPORT_KV_ALLOCATOR_PLUGIN(llmk::kv::VmAllocator)
