// Linked into the module with CONVEYOR_STATIC_DEPS (python/CMakeLists.txt). Debian's
// libjpeg.a is compiled as PIE, not PIC: its jerror.c.o reads glibc's `stderr` through
// a PC-relative relocation, which a shared object cannot resolve to a variable in
// another library, so the link fails. The module is linked with --wrap=stderr: every
// reference to `stderr` in it (libjpeg's, and ours) reads this copy instead, a pointer
// inside the module, set from glibc's (`__real_stderr`) when the module is loaded,
// before any code of the module runs.
#include <cstdio>

extern "C" {
extern FILE* __real_stderr;
[[gnu::visibility("hidden")]] FILE* __wrap_stderr = __real_stderr;
}
