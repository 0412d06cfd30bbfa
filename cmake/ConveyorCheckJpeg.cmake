# conveyor_jpeg_from_one_place(JPEG_TARGET): headers and library of libjpeg-turbo
# from the same installation, checked at configure time.
#
# JPEG_LIB_VERSION, which the library compares with its own at
# jpeg_create_decompress, is defined in jconfig.h, and Debian and Ubuntu keep
# jconfig.h in the multiarch folder (include/x86_64-linux-gnu), which
# libjpeg-turbo's CMake targets do not name. With two libjpeg installations
# (Debian's libjpeg62-turbo unpacked beside Ubuntu's libjpeg-turbo8, say), the
# compiler would take jpeglib.h from one and jconfig.h from the other, and the
# first decode would die with "Wrong JPEG library version: library is 62,
# caller expects 80". So:
#  - conveyor_jpeg_headers (an INTERFACE target of the build tree only) puts the
#    multiarch folder beside the include folder of JPEG_TARGET, ahead of the
#    compiler's own folders;
#  - a small program compiled with those headers and linked with that library
#    creates a decompressor; when the two disagree, configuring stops with both
#    versions named.
function(conveyor_jpeg_from_one_place jpeg_target)
  get_target_property(jpeg_includes ${jpeg_target} INTERFACE_INCLUDE_DIRECTORIES)
  set(extra_includes "")
  foreach(dir IN LISTS jpeg_includes)
    if(CMAKE_LIBRARY_ARCHITECTURE AND EXISTS "${dir}/${CMAKE_LIBRARY_ARCHITECTURE}/jconfig.h"
       AND NOT EXISTS "${dir}/jconfig.h")
      list(APPEND extra_includes "${dir}/${CMAKE_LIBRARY_ARCHITECTURE}")
    endif()
  endforeach()
  add_library(conveyor_jpeg_headers INTERFACE)
  if(extra_includes)
    target_include_directories(conveyor_jpeg_headers SYSTEM INTERFACE ${extra_includes})
  endif()
  if(CMAKE_CROSSCOMPILING)
    return()
  endif()

  set(probe_dir ${PROJECT_BINARY_DIR}/CMakeFiles/conveyor_jpeg_probe)
  file(WRITE ${probe_dir}/jpeg_probe.cpp [=[
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>

static std::jmp_buf failed;
static void on_error(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  std::printf("%s\n", message);
  std::longjmp(failed, 1);
}

int main() {
  std::printf("headers: JPEG_LIB_VERSION %d\n", JPEG_LIB_VERSION);
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  errors.error_exit = on_error;
  if (setjmp(failed)) return 1;
  jpeg_create_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  std::printf("library: accepts them\n");
  return 0;
}
]=])
  get_target_property(jpeg_location ${jpeg_target} LOCATION)
  try_run(run_result compile_result
    SOURCES ${probe_dir}/jpeg_probe.cpp
    NO_CACHE
    CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${extra_includes}"
    LINK_LIBRARIES ${jpeg_target}
    COMPILE_OUTPUT_VARIABLE compile_output
    RUN_OUTPUT_VARIABLE run_output)
  string(STRIP "${run_output}" run_output)
  string(REPLACE "\n" "; " run_output "${run_output}")
  if(NOT compile_result)
    message(FATAL_ERROR "libjpeg-turbo: cannot build a program with jpeglib.h and ${jpeg_target} "
                        "(${jpeg_location}):\n${compile_output}")
  elseif(NOT run_result EQUAL 0)
    message(FATAL_ERROR "libjpeg-turbo: the headers and the library come from different versions: ${run_output}. "
                        "The library is ${jpeg_location}; its headers (jpeglib.h, and jconfig.h, which defines "
                        "JPEG_LIB_VERSION) must be that installation's: ${jpeg_includes} ${extra_includes}. Point "
                        "CMAKE_PREFIX_PATH (or libjpeg-turbo_DIR) at one installation with both (docs/install.md).")
  endif()
  message(STATUS "libjpeg-turbo: ${jpeg_location}, headers in ${jpeg_includes} ${extra_includes}: ${run_output}")
endfunction()
