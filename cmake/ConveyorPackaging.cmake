# Debian packages with CPack, from a Release build (docs/install.md):
#   cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONVEYOR_TESTS=OFF
#   cmake --build build/release -j 2 && (cd build/release && cpack -G DEB)
# gives two packages:
#   conveyor          the conveyor command (and conveyor-train with LibTorch), its
#                     configs and the documentation; Depends from dpkg-shlibdeps
#   libconveyor-dev   headers, static libraries and the CMake package; Depends on the
#                     Debian -dev packages the package config finds again
set(CPACK_PACKAGE_NAME conveyor)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "Conveyor developers <conveyor@localhost>")
set(CPACK_GENERATOR DEB)
set(CPACK_COMPONENTS_ALL conveyor dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # conveyor_0.2.0-1_amd64.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_CONVEYOR_PACKAGE_NAME conveyor)
set(CPACK_DEBIAN_CONVEYOR_PACKAGE_SECTION science)
set(CPACK_DEBIAN_CONVEYOR_PACKAGE_SHLIBDEPS ON)
set(CPACK_COMPONENT_CONVEYOR_DESCRIPTION
    "The conveyor command: run, bench, sweep, inspect, make-dataset and train over Conveyor's pipeline")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libconveyor-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "Conveyor's headers, static libraries and CMake package: find_package(Conveyor 0.2 REQUIRED)")
set(_conveyor_dev_depends "libconcurrentqueue-dev" "libjpeg62-turbo-dev" "libturbojpeg0-dev" "libstb-dev" "pkg-config")
if(CONVEYOR_HAVE_TORCH)
  list(APPEND _conveyor_dev_depends "libtorch-dev")
endif()
# CUDA's static runtime comes from NVIDIA's toolkit, not from Debian: name its
# package (NVIDIA's repository calls it cuda-cudart-dev-13-0) or leave it empty
# where the toolkit was not installed with dpkg.
if(CONVEYOR_HAVE_CUDA)
  set(CONVEYOR_DEB_CUDA_DEPENDS "" CACHE STRING
      "libconveyor-dev's Depends for CUDA's static runtime, e.g. cuda-cudart-dev-13-0 (empty: none)")
  if(CONVEYOR_DEB_CUDA_DEPENDS)
    list(APPEND _conveyor_dev_depends "${CONVEYOR_DEB_CUDA_DEPENDS}")
  endif()
endif()
list(JOIN _conveyor_dev_depends ", " CPACK_DEBIAN_DEV_PACKAGE_DEPENDS)
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "cmake (>= 3.25)")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "conveyor (= ${PROJECT_VERSION}-1)")
unset(_conveyor_dev_depends)
include(CPack)
