if(ACTORLM_HAVE_CUDA)
  target_link_libraries(${name} PRIVATE actorlm_cuda actorlm_scheduler actorlm_model)
else()
  # No CUDA: nothing to measure; keep the target so scripts need no branches.
  set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL ON)
endif()
