target_link_libraries(${name} PRIVATE actorlm_actors actorlm_grammar)
