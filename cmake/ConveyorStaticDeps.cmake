# conveyor_link_stb_statically(): PkgConfig::STB (made by image/) links stb's
# static archive beside each shared library pkg-config named (Debian's
# libstb.a, position-independent) and libm, in place of libstb.so. Called
# after add_subdirectory(image): the target's link interface is read when the
# build is generated, so every target that links it gets the archive.
# A FATAL_ERROR names a library that has no archive beside it.
function(conveyor_link_stb_statically)
  get_target_property(libs PkgConfig::STB INTERFACE_LINK_LIBRARIES)
  set(archives)
  foreach(lib IN LISTS libs)
    set(archive "${lib}")
    if(lib MATCHES "^(.*)\\.so$")  # CMAKE_MATCH_1 is set once the match is done, so not in the same if()
      set(archive "${CMAKE_MATCH_1}.a")
    endif()
    if(archive MATCHES "\\.a$" AND EXISTS "${archive}")
      list(APPEND archives "${archive}")
    else()
      message(FATAL_ERROR "CONVEYOR_STATIC_DEPS: stb's ${lib} has no static archive beside it (Debian's libstb-dev ships libstb.a)")
    endif()
  endforeach()
  list(APPEND archives m)  # stb_image's pow and ldexp: libstb.so brought libm itself
  set_target_properties(PkgConfig::STB PROPERTIES INTERFACE_LINK_LIBRARIES "${archives}")
  message(STATUS "Conveyor: stb linked statically (${archives}); libjpeg-turbo's static archives (CONVEYOR_STATIC_JPEG)")
endfunction()
