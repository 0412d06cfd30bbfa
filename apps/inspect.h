// `conveyor inspect`: decode every sample once; counts by format, size and
// colour, and the unreadable files.
#pragma once

#include "apps/options.h"

namespace conveyor::apps {

// Prints the counts and each unreadable file; returns 0, or 1 when any file is
// unreadable. Throws UsageError for a bad dataset.
int inspect(const Options& o);

}  // namespace conveyor::apps
