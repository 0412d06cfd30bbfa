// stb_image compiled from Debian's own header (libstb-dev) with the fuzz build's
// sanitizers and coverage hooks. Every other build links Debian's libstb.so
// (dependencies.md); the fuzz build links this instead, so libFuzzer is guided
// through stb's decoders and ASan reports their memory errors, which it cannot
// see inside an uninstrumented shared library.
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
