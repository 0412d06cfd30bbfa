# conveyor_find_torch([REQUIRED|QUIET] [other find_package arguments]): find_package(Torch)
# that leaves Conveyor's CUDA architectures alone. Used by the build and by the
# installed ConveyorConfig.cmake.
#
# A CUDA LibTorch (the official zip or pip's torch) runs its own CUDA set-up
# inside find_package(Torch): without TORCH_CUDA_ARCH_LIST it picks
# architectures itself (with a warning, or by probing the GPU) and appends
# "-gencode" flags to CMAKE_CUDA_FLAGS, which then apply to every .cu file of
# the project as well as CMAKE_CUDA_ARCHITECTURES. So, unless the caller set
# TORCH_CUDA_ARCH_LIST (variable or environment), it is derived from
# CMAKE_CUDA_ARCHITECTURES (90 -> 9.0), and CMAKE_CUDA_FLAGS is put back as it
# was, with a status line when LibTorch had changed it. A CPU LibTorch (Debian's
# libtorch-dev) touches neither. A macro: Torch_FOUND, TORCH_LIBRARIES etc. are
# the caller's.
macro(conveyor_find_torch)
  set(_conveyor_cuda_flags_before "${CMAKE_CUDA_FLAGS}")
  set(_conveyor_set_arch_list OFF)
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND CMAKE_CUDA_ARCHITECTURES)
    set(TORCH_CUDA_ARCH_LIST "")
    foreach(_conveyor_arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
      # 90, 90a, 100f, 90-real, 90-virtual -> 9.0, 9.0a, 10.0f, 9.0, 9.0+PTX
      if(_conveyor_arch MATCHES "^([0-9]+)([0-9])([af]?)(-real|-virtual)?$")
        set(_conveyor_torch_arch "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
        if(CMAKE_MATCH_4 STREQUAL "-virtual")
          string(APPEND _conveyor_torch_arch "+PTX")
        endif()
        list(APPEND TORCH_CUDA_ARCH_LIST "${_conveyor_torch_arch}")
      endif()
    endforeach()
    if(TORCH_CUDA_ARCH_LIST)
      set(_conveyor_set_arch_list ON)
    else()
      unset(TORCH_CUDA_ARCH_LIST)
    endif()
  endif()
  # pip's torch also warns, whenever CMAKE_CUDA_ARCHITECTURES is DEFINED, that it "is not
  # compatible with" it, and sets it to OFF, which would leave our .cu files to nvcc's default
  # architecture (seen on the H100 machine): hidden from LibTorch (it has TORCH_CUDA_ARCH_LIST
  # above), a cache entry (-D) as well as the variable, and put back afterwards.
  if(DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(_conveyor_cuda_archs_before "${CMAKE_CUDA_ARCHITECTURES}")
    set(_conveyor_cuda_archs_cached OFF)
    if(DEFINED CACHE{CMAKE_CUDA_ARCHITECTURES})
      set(_conveyor_cuda_archs_cached ON)
      get_property(_conveyor_cuda_archs_doc CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY HELPSTRING)
      unset(CMAKE_CUDA_ARCHITECTURES CACHE)
    endif()
    unset(CMAKE_CUDA_ARCHITECTURES)
    find_package(Torch ${ARGN})
    if(_conveyor_cuda_archs_cached)
      set(CMAKE_CUDA_ARCHITECTURES "${_conveyor_cuda_archs_before}" CACHE STRING "${_conveyor_cuda_archs_doc}" FORCE)
    endif()
    set(CMAKE_CUDA_ARCHITECTURES "${_conveyor_cuda_archs_before}")
  else()
    find_package(Torch ${ARGN})
  endif()
  if(NOT "${CMAKE_CUDA_FLAGS}" STREQUAL "${_conveyor_cuda_flags_before}")
    message(STATUS "Conveyor: LibTorch's CMake changed CMAKE_CUDA_FLAGS to '${CMAKE_CUDA_FLAGS}'; "
                   "restored '${_conveyor_cuda_flags_before}', so CUDA code builds for "
                   "CMAKE_CUDA_ARCHITECTURES (${CMAKE_CUDA_ARCHITECTURES}) alone")
    set(CMAKE_CUDA_FLAGS "${_conveyor_cuda_flags_before}")
  endif()
  if(_conveyor_set_arch_list)
    unset(TORCH_CUDA_ARCH_LIST)
  endif()
  unset(_conveyor_cuda_flags_before)
  unset(_conveyor_cuda_archs_before)
  unset(_conveyor_cuda_archs_cached)
  unset(_conveyor_cuda_archs_doc)
  unset(_conveyor_set_arch_list)
  unset(_conveyor_arch)
  unset(_conveyor_torch_arch)
endmacro()
