// `conveyor sweep`: a grid of runs, one row per point (images/s, consumer idle
// %, peak RSS), each point in a child process of its own; --csv writes the
// rows, --plot draws them with gnuplot.
#pragma once

#include "apps/options.h"

namespace conveyor::apps {

// Runs the grid of o's sweep axes (an empty axis: the single-value flag).
// Returns 0, or 1 when a point failed. Throws UsageError (--plot without --csv).
int sweep(const Options& o);

}  // namespace conveyor::apps
