// `conveyor pack`: a dataset (list, folder, or shards again) written as
// WebDataset tar shards: for sample i in dataset order, KEY.ext with the image
// file's bytes (a sequential JPEG's re-encoded losslessly with restart markers,
// the same pixels, unless --original-bytes; --max-side and --raw recode them),
// KEY.cls with its label,
// KEY.conveyor-source
// with its name below the dataset's folder (Dataset::relative_name: a resume
// compares those, so a run goes on across a folder and its shards) and, for a
// dataset with class names (a folder), KEY.conveyor-class with its class's
// (names of conveyor's own: webdataset's decoders take `.class` for an
// integer label); KEY
// being i in nine digits; a new shard (shard-000000.tar, ...) once the next
// sample would take the current one past --shard-mb. Any tar tool or the
// webdataset library reads them; --shards DIR reads them back, starting from
// the index (DIR/.conveyor-index) pack writes last, after scanning its shards.
#pragma once

#include "apps/options.h"

namespace conveyor::apps {

// Packs; prints a progress line on a terminal and a summary. Returns 0.
// Throws UsageError for a bad --out (exists and is not an empty folder) or a
// sample whose file has no image extension, std::runtime_error naming the file
// when a sample cannot be read or a shard cannot be written; on any failure
// the shards written so far are removed.
int pack(const Options& o);

}  // namespace conveyor::apps
