# xgrammar 0.2.8's C++ core as the static library `xgrammar`, from the
# source scripts/fetch_xgrammar.sh fetched. A file of its own so that a build
# other than grammar/'s (a fuzz target over constraint.cpp) can include it
# with its own compiler flags.
if(DEFINED ENV{ACTORLM_CACHE})
  set(_xgrammar_default "$ENV{ACTORLM_CACHE}/xgrammar-0.2.8")
else()
  set(_xgrammar_default "$ENV{HOME}/.cache/actorlm/xgrammar-0.2.8")
endif()
set(ACTORLM_XGRAMMAR_DIR "${_xgrammar_default}" CACHE PATH "xgrammar 0.2.8 source (scripts/fetch_xgrammar.sh)")
if(NOT EXISTS "${ACTORLM_XGRAMMAR_DIR}/CMakeLists.txt")
  message(FATAL_ERROR "xgrammar source not found at ${ACTORLM_XGRAMMAR_DIR}: run scripts/setup.sh")
endif()
# Its own CMakeLists.txt builds Python bindings whenever its bundled
# cmake/config.cmake is present (it is, in the sdist); the library itself is
# a glob of cpp/*.cc, built here with our compiler settings instead.
file(GLOB_RECURSE _xgrammar_sources CONFIGURE_DEPENDS "${ACTORLM_XGRAMMAR_DIR}/cpp/*.cc")
list(FILTER _xgrammar_sources EXCLUDE REGEX "/cpp/(tvm_ffi|nanobind)/")
add_library(xgrammar STATIC ${_xgrammar_sources})
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
# SYSTEM: third-party headers, outside our -Werror; its warnings are not ours.
target_include_directories(xgrammar SYSTEM PUBLIC ${ACTORLM_XGRAMMAR_DIR}/include
                           ${ACTORLM_XGRAMMAR_DIR}/3rdparty/picojson ${ACTORLM_XGRAMMAR_DIR}/3rdparty/dlpack/include)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_compile_options(xgrammar PRIVATE -w)
