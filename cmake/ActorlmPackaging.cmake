# Install rules and the Debian package (issue 20): the `actorlm` binary, the
# systemd unit and its settings template, the deployment guide.
#
#   cmake --install build --prefix P      # P/bin/actorlm, P/lib/systemd/system/..., P/share/...
#   (cd build-cpu && cpack -G DEB)        # actorlm_<version>_<arch>.deb
#
# The package is made from the CPU-only configuration (-DACTORLM_CUDA=OFF):
# its dependencies are all Debian packages, found by dpkg-shlibdeps. A CUDA
# build links NVIDIA's libraries, which no Debian package provides; it is
# installed from source (docs/DEPLOY.md).
include(GNUInstallDirs)

install(TARGETS actorlm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/actorlm-serve.service DESTINATION lib/systemd/system COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/actorlm-serve.env DESTINATION ${CMAKE_INSTALL_DATADIR}/actorlm
        COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/docs/DEPLOY.md ${PROJECT_SOURCE_DIR}/docs/EMBEDDING.md ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)

# The embeddable engine (docs/EMBEDDING.md): its static libraries in link
# order, the headers an application's includes reach (the public ones are
# actors/engine.hpp and actors/wire.hpp; the rest come because they
# include them), a CMake package and a pkg-config file. Installed in the
# package carries them too.
# A CUDA build's engine links no CUDA code: it dlopens the module
# (<libdir>/actorlm/libactorlm_cuda.so, installed by executor/) for
# --device cuda, so an application needs neither cudart nor cuBLAS to link.
set(ACTORLM_ENGINE_LIBS actorlm_actors actorlm_scheduler actorlm_grammar xgrammar actorlm_tokenizer actorlm_jinja
    actorlm_model actorlm_kernels_cpu actorlm_kernels actorlm_kvstore actorlm_messages)
install(TARGETS ${ACTORLM_ENGINE_LIBS} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}/actorlm COMPONENT dev)
# Installed archives carry no debug information (most of their size:
# 56 MB of a .deb against ~10); their symbols stay. The build folder keeps
# the debug builds.
install(CODE "file(GLOB _archives \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/actorlm/*.a\")
foreach(_a \${_archives})
  execute_process(COMMAND ${CMAKE_STRIP} --strip-debug \${_a})
endforeach()" COMPONENT dev)
foreach(dir actors grammar jinja kernels kvstore messages model scheduler tokenizer)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorlm
          COMPONENT dev FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(DIRECTORY ${PROJECT_BINARY_DIR}/generated/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorlm
        COMPONENT dev FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
set(_cfgdir ${CMAKE_INSTALL_LIBDIR}/cmake/actorlm)
file(RELATIVE_PATH ACTORLM_CFG_TO_PREFIX "/p/${_cfgdir}" "/p")
file(RELATIVE_PATH ACTORLM_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
set(ACTORLM_PC_LIBS "")
foreach(l ${ACTORLM_ENGINE_LIBS})
  string(APPEND ACTORLM_PC_LIBS " -l${l}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/actorlmConfig.cmake.in ${PROJECT_BINARY_DIR}/actorlmConfig.cmake @ONLY)
include(CMakePackageConfigHelpers)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/actorlmConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/actorlmConfig.cmake ${PROJECT_BINARY_DIR}/actorlmConfigVersion.cmake
        DESTINATION ${_cfgdir} COMPONENT dev)
set(ACTORLM_PC_DL "")
if(ACTORLM_HAVE_CUDA)
  set(ACTORLM_PC_DL "-ldl")  # the module loader
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/actorlm.pc.in ${PROJECT_BINARY_DIR}/actorlm.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/actorlm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# Two packages, as Debian splits a library: actorlm (the binary and the
# service) and actorlm-dev (headers, static libraries, CMake and pkg-config
# files for embedding).
set(CPACK_PACKAGE_NAME actorlm)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME actorlm)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME actorlm-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libcaf-dev, libflatbuffers-dev, nlohmann-json3-dev, libopenblas-dev, libutf8proc-dev, zlib1g-dev, libssl-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "actorlm maintainers <actorlm@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM serving runtime with an OpenAI-compatible server (CPU backend)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The package carries no debug information (the build folder keeps it).
set(CPACK_STRIP_FILES ON)
# systemd runs the unit; the package works without it (actorlm serve by hand).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "systemd")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_GENERATOR DEB)
include(CPack)
