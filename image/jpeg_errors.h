// libjpeg's errors for the image layer's own libjpeg code (decode.cpp,
// jpeg_restart.cpp): an error becomes a longjmp back to the function that set
// `jump`, which turns it into an exception once no libjpeg frame is on the
// stack. A private header: jpeglib.h stays out of the public ones.
#pragma once

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs size_t and FILE declared first

#include <jpeglib.h>

namespace conveyor::detail {

struct JpegErrors {
  jpeg_error_mgr pub;  // first member: libjpeg's err pointer is also a JpegErrors*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

// Points `e` at libjpeg's standard manager with the two handlers below.
jpeg_error_mgr* jpeg_errors_init(JpegErrors& e);

// error_exit: formats the message into JpegErrors::message and longjmps.
extern "C" void conveyor_jpeg_fail(j_common_ptr c);

// emit_message: libjpeg pads a truncated file with grey and only warns. Missing
// data is an error here, so truncation is never delivered as a half-grey image;
// other warnings (e.g. stray bytes between markers) are tolerated, as PIL does,
// and counted in pub.num_warnings as libjpeg's own handler counts them.
extern "C" void conveyor_jpeg_warn(j_common_ptr c, int level);

}  // namespace conveyor::detail
