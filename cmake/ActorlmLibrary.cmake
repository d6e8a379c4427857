# actorlm_glob_library(<target> [LIBS <deps...>]): a static library of every
# .cpp in the calling folder. Folders are one library each, so adding a file
# needs no build edit.
function(actorlm_glob_library target)
  cmake_parse_arguments(L "" "" "LIBS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(NOT sources)
    # Header-only until its first .cpp lands.
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE actorlm_warnings ${L_LIBS})
    return()
  endif()
  add_library(${target} STATIC ${sources})
  target_link_libraries(${target} PUBLIC actorlm_warnings ${L_LIBS})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# actorlm_glob_tests(LIBS <deps...>): one test executable per *_test.cpp in the
# calling folder, named after its path under tests/ (tests/cluster/transport/
# tcp_gate_test.cpp: cluster_transport_tcp_gate_test).
function(actorlm_glob_tests)
  cmake_parse_arguments(T "" "" "LIBS" ${ARGN})
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR}/tests ${CMAKE_CURRENT_SOURCE_DIR})
  string(REPLACE "/" "_" folder ${folder})
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cpp)
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    actorlm_add_test(${folder}_${name} SOURCES ${src} LIBS ${T_LIBS})
  endforeach()
endfunction()
