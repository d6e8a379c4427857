# The CUDA backend is compiled when nvcc is present (and ACTORLM_CUDA is not
# OFF). It targets sm_90 (H100/H200) only, to keep CI builds short.
set(ACTORLM_HAVE_CUDA OFF)
if(NOT ACTORLM_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES 90)
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc 13 speaks C++20: tell it the flag.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    set(CMAKE_CUDA_STANDARD 20)  # the .cu files include kernels/ and model/ headers (C++20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(ACTORLM_HAVE_CUDA ON)
  elseif(ACTORLM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ACTORLM_CUDA=ON but nvcc was not found")
  endif()
endif()
message(STATUS "actorlm: CUDA backend ${ACTORLM_HAVE_CUDA}")

# Where the CUDA backend module (libactorlm_cuda.so, executor/) lives,
# relative to the build folder and to the install prefix alike, and the
# way there from the binary's folder, which the loader in
# actors/executor_factory.cpp tries first.
include(GNUInstallDirs)
set(ACTORLM_CUDA_MODULE_DIR ${CMAKE_INSTALL_LIBDIR}/actorlm)
file(RELATIVE_PATH ACTORLM_CUDA_MODULE_FROM_BIN "/p/${CMAKE_INSTALL_BINDIR}" "/p/${ACTORLM_CUDA_MODULE_DIR}")
