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

install(TARGETS actorlm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/packaging/actorlm-serve.service DESTINATION lib/systemd/system)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/actorlm-serve.env DESTINATION ${CMAKE_INSTALL_DATADIR}/actorlm)
install(FILES ${PROJECT_SOURCE_DIR}/docs/DEPLOY.md ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_PACKAGE_NAME actorlm)
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
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_GENERATOR DEB)
include(CPack)
