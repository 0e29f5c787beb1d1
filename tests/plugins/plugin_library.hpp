// Opens one built plugin library and returns its table, without the core's
// loader: these tests check a plugin against its C contract alone.
#pragma once

#include <dlfcn.h>

#include <boost/dll/import.hpp>
#include <boost/dll/shared_library.hpp>

#include <string>

#include "plugins/api/llmk_plugin.h"

namespace llmk::test {

class PluginLibrary {
 public:
  explicit PluginLibrary(const std::string& file_stem)
      : library_(std::string(LLMK_PLUGIN_BUILD_DIR) + "/lib" + file_stem + ".so") {
    info_ = library_.get_alias<const llmk_plugin_info*()>("llmk_plugin_entry")();
    // These libraries live in function-local statics destroyed at exit, while
    // OpenMP workers the plugin started may still be winding down: keep the
    // plugin and what it pulled in mapped until the process ends.
    dlopen(library_.location().c_str(), RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  }
  const llmk_plugin_info& info() const { return *info_; }
  template <class Api>
  const Api& api() const {
    return *static_cast<const Api*>(info_->api);
  }

 private:
  boost::dll::shared_library library_;
  const llmk_plugin_info* info_ = nullptr;
};

}  // namespace llmk::test
