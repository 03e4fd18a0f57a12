# libtorch from the torch wheel, as one INTERFACE target: cube3d::torch.
#
# We do not use the wheel's own Torch CMake targets: they put the whole torch/include folder on
# the include path, and that folder bundles its own fmt (v12, which breaks Debian's spdlog) and
# protobuf headers (which would shadow the ones gRPC is built against). We expose only the
# ATen/c10/torch/caffe2 header trees, through a folder of symlinks in the build tree.
#
# TORCH_ROOT: the torch package folder (site-packages/torch). Found with python3 when unset.
if(NOT TORCH_ROOT)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import os, torch; print(os.path.dirname(torch.__file__))"
    OUTPUT_VARIABLE TORCH_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE torch_found)
  if(NOT torch_found EQUAL 0)
    message(FATAL_ERROR "torch is not installed for ${Python3_EXECUTABLE}: run scripts/setup.sh "
                        "or pass -DTORCH_ROOT=<site-packages/torch>")
  endif()
endif()
set(TORCH_ROOT ${TORCH_ROOT} CACHE PATH "torch package folder (site-packages/torch)")
if(NOT EXISTS ${TORCH_ROOT}/include/ATen/ATen.h)
  message(FATAL_ERROR "TORCH_ROOT=${TORCH_ROOT} has no include/ATen/ATen.h")
endif()

set(CUBE3D_TORCH_INCLUDE ${CMAKE_BINARY_DIR}/torch_include)
file(MAKE_DIRECTORY ${CUBE3D_TORCH_INCLUDE})
foreach(dir ATen c10 torch caffe2)
  if(EXISTS ${TORCH_ROOT}/include/${dir})
    file(CREATE_LINK ${TORCH_ROOT}/include/${dir} ${CUBE3D_TORCH_INCLUDE}/${dir} SYMBOLIC)
  endif()
endforeach()

# CUBE3D_TORCH_CUDA=OFF: the CPU-only binaries of the CPU image, linked to libtorch_cpu and
# libc10 alone, with no CUDA code of ours: the install tree then carries neither libtorch_cuda
# nor the wheel's CUDA libraries (cuBLAS, cuDNN, NCCL, ...), only the CUDA runtime and CUPTI
# stubs that libtorch_cpu of a CUDA wheel itself needs (about 5 MB). ON (the default): the CUDA
# backend too, when the wheel has it.
option(CUBE3D_TORCH_CUDA "link libtorch's CUDA backend (and build the CUDA code) when the torch wheel has it" ON)
set(torch_libs)
foreach(lib torch_cpu c10)
  find_library(CUBE3D_TORCH_LIB_${lib} ${lib} PATHS ${TORCH_ROOT}/lib NO_DEFAULT_PATH REQUIRED)
  list(APPEND torch_libs ${CUBE3D_TORCH_LIB_${lib}})
endforeach()
# The CUDA wheel also registers the CUDA kernels; they load without a GPU and answer
# "no device" at run time.
set(CUBE3D_TORCH_HAS_CUDA OFF)
find_library(CUBE3D_TORCH_LIB_torch_cuda torch_cuda PATHS ${TORCH_ROOT}/lib NO_DEFAULT_PATH)
find_library(CUBE3D_TORCH_LIB_c10_cuda c10_cuda PATHS ${TORCH_ROOT}/lib NO_DEFAULT_PATH)
if(CUBE3D_TORCH_CUDA AND CUBE3D_TORCH_LIB_torch_cuda AND CUBE3D_TORCH_LIB_c10_cuda)
  set(CUBE3D_TORCH_HAS_CUDA ON)
endif()

add_library(cube3d_torch INTERFACE)
add_library(cube3d::torch ALIAS cube3d_torch)
target_include_directories(cube3d_torch SYSTEM INTERFACE ${CUBE3D_TORCH_INCLUDE})
target_compile_definitions(cube3d_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
if(CUBE3D_TORCH_HAS_CUDA)
  # --no-as-needed: nothing references libtorch_cuda's symbols directly, but loading it is
  # what registers the CUDA backend.
  target_link_libraries(cube3d_torch INTERFACE
    "-Wl,--no-as-needed,${CUBE3D_TORCH_LIB_torch_cuda},${CUBE3D_TORCH_LIB_c10_cuda},--as-needed")
endif()
target_link_libraries(cube3d_torch INTERFACE ${torch_libs})
set(CMAKE_BUILD_RPATH ${CMAKE_BUILD_RPATH} ${TORCH_ROOT}/lib)
if(CUBE3D_TORCH_HAS_CUDA)
  message(STATUS "libtorch: ${TORCH_ROOT} (CUDA backend: ON)")
elseif(CUBE3D_TORCH_LIB_torch_cuda)
  message(STATUS "libtorch: ${TORCH_ROOT} (CUDA backend: OFF, CUBE3D_TORCH_CUDA=OFF: CPU only)")
else()
  message(STATUS "libtorch: ${TORCH_ROOT} (CUDA backend: OFF, a CPU-only wheel)")
endif()
