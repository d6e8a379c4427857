# xgrammar 0.2.8's C++ core as the static library `xgrammar`, from the
# source scripts/fetch_xgrammar.sh fetched. A file of its own so that a build
# other than grammar/'s (a fuzz target over constraint.cpp) can include it
# with its own compiler flags.
# The patch level is scripts/fetch_xgrammar.sh's; it is checked, not just the
# folder, so that a source without our patches (scripts/patches/) is refused.
set(_xgrammar_level "p1")
if(DEFINED ENV{ACTORLM_CACHE})
  set(_xgrammar_default "$ENV{ACTORLM_CACHE}/xgrammar-0.2.8-${_xgrammar_level}")
else()
  set(_xgrammar_default "$ENV{HOME}/.cache/actorlm/xgrammar-0.2.8-${_xgrammar_level}")
endif()
# Empty means the fetch script's folder, looked up at each configure, so that a
# new patch level reaches existing build folders by themselves.
set(ACTORLM_XGRAMMAR_DIR "" CACHE PATH "xgrammar 0.2.8 source (empty: scripts/fetch_xgrammar.sh's folder)")
set(_xgrammar_dir "${ACTORLM_XGRAMMAR_DIR}")
# A build folder configured before the patches cached the unpatched folder.
if(_xgrammar_dir STREQUAL "" OR _xgrammar_dir MATCHES "/xgrammar-0\\.2\\.8$")
  set(_xgrammar_dir "${_xgrammar_default}")
endif()
if(NOT EXISTS "${_xgrammar_dir}/CMakeLists.txt")
  message(FATAL_ERROR "xgrammar source not found at ${_xgrammar_dir}: run scripts/setup.sh")
endif()
if(EXISTS "${_xgrammar_dir}/.actorlm-patch-level")
  file(STRINGS "${_xgrammar_dir}/.actorlm-patch-level" _found_level LIMIT_COUNT 1)
endif()
if(NOT _found_level STREQUAL _xgrammar_level)
  message(FATAL_ERROR "xgrammar source at ${_xgrammar_dir} lacks patch level ${_xgrammar_level} "
    "(scripts/patches/): run scripts/fetch_xgrammar.sh, and leave ACTORLM_XGRAMMAR_DIR "
    "empty or name the folder it prints")
endif()
# Its own CMakeLists.txt builds Python bindings whenever its bundled
# cmake/config.cmake is present (it is, in the sdist); the library itself is
# a glob of cpp/*.cc, built here with our compiler settings instead.
file(GLOB_RECURSE _xgrammar_sources CONFIGURE_DEPENDS "${_xgrammar_dir}/cpp/*.cc")
list(FILTER _xgrammar_sources EXCLUDE REGEX "/cpp/(tvm_ffi|nanobind)/")
add_library(xgrammar STATIC ${_xgrammar_sources})
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
# SYSTEM: third-party headers, outside our -Werror; its warnings are not ours.
target_include_directories(xgrammar SYSTEM PUBLIC ${_xgrammar_dir}/include
                           ${_xgrammar_dir}/3rdparty/picojson ${_xgrammar_dir}/3rdparty/dlpack/include)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
target_compile_options(xgrammar PRIVATE -w)
