# XGrammar's C++ core (structured outputs, core/grammar.cpp): a static
# library that scripts/setup.sh builds from the pinned PyPI sdist into a
# prefix in the cache. Optional: without it llmk builds, and requests for
# structured outputs are refused with a 400 that says so.
#
#   LLMK_XGRAMMAR_ROOT  the install prefix (include/xgrammar, lib/libxgrammar.a);
#                       empty turns structured outputs off.
#
# Sets LLMK_HAVE_XGRAMMAR and, when found, the imported target llmk::xgrammar.
set(LLMK_XGRAMMAR_VERSION 0.2.9)
if(DEFINED ENV{LLMK_MODEL_CACHE} AND NOT "$ENV{LLMK_MODEL_CACHE}" STREQUAL "")
  set(_llmk_cache_root "$ENV{LLMK_MODEL_CACHE}")
else()
  set(_llmk_cache_root "$ENV{HOME}/.cache/llmk")
endif()
set(LLMK_XGRAMMAR_ROOT "${_llmk_cache_root}/xgrammar-${LLMK_XGRAMMAR_VERSION}" CACHE PATH
  "XGrammar install prefix (scripts/setup.sh builds it there); empty: no structured outputs")

set(LLMK_HAVE_XGRAMMAR OFF)
set(_llmk_xgrammar_library "")
if(NOT LLMK_XGRAMMAR_ROOT STREQUAL "" AND EXISTS "${LLMK_XGRAMMAR_ROOT}/include/xgrammar/xgrammar.h")
  foreach(libdir lib lib64)
    if(EXISTS "${LLMK_XGRAMMAR_ROOT}/${libdir}/libxgrammar.a")
      set(_llmk_xgrammar_library "${LLMK_XGRAMMAR_ROOT}/${libdir}/libxgrammar.a")
      break()
    endif()
  endforeach()
endif()

if(_llmk_xgrammar_library)
  set(LLMK_HAVE_XGRAMMAR ON)
  if(NOT TARGET llmk::xgrammar)
    add_library(llmk::xgrammar STATIC IMPORTED)
    set_target_properties(llmk::xgrammar PROPERTIES
      IMPORTED_LOCATION "${_llmk_xgrammar_library}"
      INTERFACE_INCLUDE_DIRECTORIES "${LLMK_XGRAMMAR_ROOT}/include"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
  endif()
  message(STATUS "XGrammar ${LLMK_XGRAMMAR_VERSION}: ${_llmk_xgrammar_library} (structured outputs on)")
else()
  message(STATUS "XGrammar: not found under LLMK_XGRAMMAR_ROOT='${LLMK_XGRAMMAR_ROOT}' "
    "(scripts/setup.sh builds it); structured outputs off")
endif()
