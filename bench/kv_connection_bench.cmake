target_link_libraries(${name} PRIVATE actorlm_cluster_transfer)
