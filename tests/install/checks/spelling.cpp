// Both spellings of Conveyor's headers resolve to the same headers, in the
// source tree and installed: "conveyor/<layer>/..." (recommended, docs/install.md)
// and "<layer>/..." (the spelling inside the library and the README's example);
// and conveyor/version.h is generated. Prints "Conveyor <version>".
#include <cstdio>

#include "conveyor/device/device_pipeline.h"
#include "conveyor/pipeline/pipeline.h"
#include "conveyor/version.h"
#include "device/device_pipeline.h"
#include "image/image_source.h"

static_assert(CONVEYOR_VERSION ==
              CONVEYOR_MAKE_VERSION(CONVEYOR_VERSION_MAJOR, CONVEYOR_VERSION_MINOR, CONVEYOR_VERSION_PATCH));
static_assert(CONVEYOR_VERSION >= CONVEYOR_MAKE_VERSION(0, 2, 0));

int main() {
  conveyor::Config config;  // a type from each spelling's header, so both really compiled
  conveyor::TransferConfig transfer;
  (void)config;
  (void)transfer;
  std::printf("Conveyor %s\n", CONVEYOR_VERSION_STRING);
}
