# SPDX-FileCopyrightText: 2026 commpress authors
# SPDX-License-Identifier: Apache-2.0
#
# Optional communicator adapters (include/commpress/comm): commpress::mpi and commpress::nccl.
#
# The root CMakeLists.txt includes this file after defining commpress::commpress and enabling
# CUDA (if any), and before add_subdirectory(tests):
#
#   list(APPEND CMAKE_MODULE_PATH "${PROJECT_SOURCE_DIR}/cmake")
#   include(commpress_comm OPTIONAL)
#
# Neither adapter is required: without MPI (or without CUDA + NCCL) its target is simply not
# defined, with a status message; the core library needs neither. The loopback communicator
# (comm/loopback.hpp) is part of commpress::commpress and needs only Threads. Tests live in
# tests/comm/CMakeLists.txt and use the variables below.
#
# Inputs (all optional):
#   COMMPRESS_ENABLE_MPI     ON  define commpress::mpi when find_package(MPI COMPONENTS CXX)
#                                succeeds
#   COMMPRESS_ENABLE_NCCL    ON  define commpress::nccl when CUDA is enabled (COMMPRESS_HAS_CUDA,
#                                or CUDA among the enabled languages if that is not set), the
#                                CUDA toolkit is found and nccl.h + libnccl are found
#   NCCL_ROOT (var or env)       extra prefix to search for include/nccl.h and lib*/libnccl
#
# Outputs:
#   commpress::mpi   INTERFACE: commpress::commpress + MPI::MPI_CXX (C API only:
#                    OMPI_SKIP_MPICXX / MPICH_SKIP_MPICXX)
#   commpress::nccl  INTERFACE: commpress::commpress + libnccl + CUDA::cudart, C++20 for nvcc
#   COMMPRESS_HAS_MPI, COMMPRESS_HAS_NCCL   ON/OFF

include_guard(GLOBAL)

option(COMMPRESS_ENABLE_MPI "Define commpress::mpi when MPI is found" ON)
option(COMMPRESS_ENABLE_NCCL "Define commpress::nccl when CUDA is enabled and NCCL is found" ON)

# Headers for an adapter: commpress::commpress when the root defined it, else this checkout's
# include directory (stand-alone use of this file).
function(_commpress_comm_add_adapter target)
  add_library(${target} INTERFACE)
  if(TARGET commpress::commpress)
    target_link_libraries(${target} INTERFACE commpress::commpress)
  else()
    get_filename_component(_include "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../include" ABSOLUTE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${_include}>
                                                   $<INSTALL_INTERFACE:include>)
    target_compile_features(${target} INTERFACE cxx_std_20)
  endif()
endfunction()

# --- commpress::mpi ---------------------------------------------------------------------------
set(COMMPRESS_HAS_MPI OFF)
if(COMMPRESS_ENABLE_MPI)
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    _commpress_comm_add_adapter(commpress_mpi)
    add_library(commpress::mpi ALIAS commpress_mpi)
    target_link_libraries(commpress_mpi INTERFACE MPI::MPI_CXX)
    # mpi.hpp uses the MPI C API only; skip the deprecated C++ bindings mpi.h would pull in.
    target_compile_definitions(commpress_mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
    set(COMMPRESS_HAS_MPI ON)
  else()
    message(STATUS "commpress: MPI not found: commpress::mpi is not defined")
  endif()
endif()

# --- commpress::nccl --------------------------------------------------------------------------
set(COMMPRESS_HAS_NCCL OFF)
if(DEFINED COMMPRESS_HAS_CUDA)
  set(_commpress_comm_cuda ${COMMPRESS_HAS_CUDA})
else()
  get_property(_commpress_comm_langs GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("CUDA" IN_LIST _commpress_comm_langs)
    set(_commpress_comm_cuda ON)
  else()
    set(_commpress_comm_cuda OFF)
  endif()
endif()
if(COMMPRESS_ENABLE_NCCL AND _commpress_comm_cuda)
  find_package(CUDAToolkit)
  find_path(COMMPRESS_NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
    PATH_SUFFIXES include)
  find_library(COMMPRESS_NCCL_LIBRARY NAMES nccl
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
    PATH_SUFFIXES lib64 lib)
  if(CUDAToolkit_FOUND AND COMMPRESS_NCCL_INCLUDE_DIR AND COMMPRESS_NCCL_LIBRARY)
    _commpress_comm_add_adapter(commpress_nccl)
    add_library(commpress::nccl ALIAS commpress_nccl)
    target_include_directories(commpress_nccl SYSTEM INTERFACE ${COMMPRESS_NCCL_INCLUDE_DIR})
    target_link_libraries(commpress_nccl INTERFACE ${COMMPRESS_NCCL_LIBRARY} CUDA::cudart)
    if(CMAKE_VERSION VERSION_LESS 3.25.2)
      # CMake 3.25.1 has no cuda_std_20 entry for nvcc (fixed in 3.25.2; docs/cuda.md).
      target_compile_options(commpress_nccl INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
    else()
      target_compile_features(commpress_nccl INTERFACE cuda_std_20)
    endif()
    set(COMMPRESS_HAS_NCCL ON)
    message(STATUS "commpress: NCCL: ${COMMPRESS_NCCL_LIBRARY}")
  else()
    message(STATUS "commpress: CUDA toolkit or NCCL not found: commpress::nccl is not defined")
  endif()
elseif(COMMPRESS_ENABLE_NCCL)
  message(STATUS "commpress: CUDA is not enabled: commpress::nccl is not defined")
endif()
unset(_commpress_comm_cuda)
unset(_commpress_comm_langs)
