# What `cmake --install` puts where (CONVEYOR_INSTALL, on when Conveyor is the
# top-level project), the CMake package a consumer finds with
#   find_package(Conveyor 0.2 REQUIRED COMPONENTS device torch)
# and the Debian packages CPack makes from it (cmake/ConveyorPackaging.cmake).
#
#   bin/conveyor, bin/conveyor-train            component conveyor (Debian: conveyor)
#   share/conveyor/configs/*.toml, share/doc/conveyor/
#   include/conveyor/<layer>/*.h, conveyor/version.h   component dev (Debian: libconveyor-dev)
#   lib/libconveyor_<layer>.a
#   lib/cmake/Conveyor/                          ConveyorConfig.cmake and friends
include(CMakePackageConfigHelpers)
set(CONVEYOR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Conveyor)

# ---- the libraries and their headers. LibTorch's layer is an export set of its
# own, loaded only for COMPONENTS torch, so finding Conveyor never loads LibTorch
# unless asked to.
install(TARGETS conveyor_pipeline conveyor_data conveyor_image conveyor_device conveyor_gpu_decode conveyor_source EXPORT ConveyorTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/conveyor COMPONENT dev
  FILE_SET version DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/conveyor COMPONENT dev)
install(EXPORT ConveyorTargets NAMESPACE Conveyor:: DESTINATION ${CONVEYOR_CMAKE_DIR} COMPONENT dev)
if(CONVEYOR_HAVE_TORCH)
  install(TARGETS conveyor_torch EXPORT ConveyorTorchTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
    FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/conveyor COMPONENT dev)
  install(EXPORT ConveyorTorchTargets NAMESPACE Conveyor:: DESTINATION ${CONVEYOR_CMAKE_DIR} COMPONENT dev)
endif()

# ---- the package: config (finds the dependencies again), version (0.2.x takes
# 0.2.y for y <= x: SameMinorVersion, as 0.x versions change the API per minor).
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ConveyorConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ConveyorConfig.cmake INSTALL_DESTINATION ${CONVEYOR_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ConveyorConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ConveyorConfig.cmake ${PROJECT_BINARY_DIR}/ConveyorConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/ConveyorFindTorch.cmake
        DESTINATION ${CONVEYOR_CMAKE_DIR} COMPONENT dev)

# ---- the command, its shipped configs and the documentation
foreach(program conveyor conveyor-train)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT conveyor)
  endif()
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/conveyor/configs
        COMPONENT conveyor FILES_MATCHING PATTERN "*.toml")
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT conveyor)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        COMPONENT conveyor FILES_MATCHING PATTERN "*.md" PATTERN "*.png")

include(ConveyorPackaging)
