# cmake --install: headers, libraries, plugins, the llmk command, and a CMake
# package so that find_package(llmk) gives llmk::core (and llmk::actors,
# llmk::ipc where built) to programs outside this tree.
include(CMakePackageConfigHelpers)

set(llmk_export_targets llmk_core llmk_kernels_cpu llmk_warnings llmk_arch llmk_plugin_api)
foreach(t llmk_actors llmk_ipc llmk_cuda llmk_kernels_cuda)
  if(TARGET ${t})
    list(APPEND llmk_export_targets ${t})
  endif()
endforeach()

# Exported as llmk::core, llmk::actors, llmk::kernels_cpu, ... (the alias
# names used inside this tree).
foreach(t ${llmk_export_targets})
  string(REGEX REPLACE "^llmk_" "" export_name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

install(TARGETS ${llmk_export_targets} EXPORT llmkTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/llmk)

foreach(dir core actors ipc kernels plugins/api)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/llmk/${dir}
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" PATTERN "testing" EXCLUDE)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/config/ DESTINATION ${CMAKE_INSTALL_DATADIR}/llmk/config)

install(EXPORT llmkTargets NAMESPACE llmk:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/llmk)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/llmkConfig.cmake.in
  ${CMAKE_BINARY_DIR}/llmkConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/llmk
  PATH_VARS LLMK_PLUGIN_INSTALL_DIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/llmkConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/llmkConfig.cmake ${CMAKE_BINARY_DIR}/llmkConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/LlmkDependencies.cmake ${PROJECT_SOURCE_DIR}/cmake/LlmkXGrammar.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/llmk)
