target_link_libraries(${name} PRIVATE actorlm_jinja)
target_compile_definitions(${name} PRIVATE ACTORLM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
