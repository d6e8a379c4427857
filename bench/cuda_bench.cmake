if(ACTORLM_HAVE_CUDA)
  # cuda_microbench.cpp: kernel timings that only this benchmark takes.
  target_sources(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda_microbench.cpp)
  target_link_libraries(${name} PRIVATE actorlm_cuda_executor actorlm_scheduler actorlm_model)
else()
  # No CUDA: nothing to measure; keep the target so scripts need no branches.
  set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL ON)
endif()
