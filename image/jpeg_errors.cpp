#include "image/jpeg_errors.h"

#include <jerror.h>

namespace conveyor::detail {

jpeg_error_mgr* jpeg_errors_init(JpegErrors& e) {
  jpeg_std_error(&e.pub);
  e.pub.error_exit = conveyor_jpeg_fail;
  e.pub.emit_message = conveyor_jpeg_warn;
  e.message[0] = '\0';
  return &e.pub;
}

extern "C" void conveyor_jpeg_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

extern "C" void conveyor_jpeg_warn(j_common_ptr c, int level) {
  if (level != -1) return;  // trace messages
  if (c->err->msg_code == JWRN_JPEG_EOF || c->err->msg_code == JWRN_HIT_MARKER) conveyor_jpeg_fail(c);
  ++c->err->num_warnings;
}

}  // namespace conveyor::detail
