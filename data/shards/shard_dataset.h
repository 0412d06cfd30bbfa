// A folder of WebDataset tar shards (conveyor pack's, or anyone's) read into a
// Dataset whose samples are byte ranges of the shards.
#pragma once

#include <filesystem>

#include "data/dataset.h"
#include "data/shards/shard_index.h"

namespace conveyor {

// Every regular *.tar file directly in dir, in byte
// order of name, each scanned once (scan_tar: headers only), or their index
// read from its cache (shard_index.h). Members group
// into samples by key, the member path up to the first '.' of its file name
// (webdataset's rule: "a/0001.jpg" and "a/0001.cls" are sample "a/0001");
// a sample is its one image member (an extension from data/image_extensions.h,
// matched on the part after the key, case-insensitive) labelled by KEY.cls
// (a decimal integer, blanks around it allowed). `conveyor pack` adds two
// members, read when present: KEY.conveyor-source, the sample's name where
// it was packed from (Dataset::relative_name()), and KEY.conveyor-class, its class's
// name; classes()
// comes from them ("" for a label no sample carries). Other members (.json,
// .txt) are ignored. Samples in shard order, then in the order their keys first
// appear. Sample i is read with one pread of range(i) from path(i), the shard.
// The dataset's source() is `dir`.
// Throws DatasetError naming the folder, shard or member: not a directory, no
// .tar in it, a tar that does not scan (scan_tar's reasons), a key without an
// image or without .cls, a key with two images (or two of .cls,
// .conveyor-source, .conveyor-class), a .cls that is not an integer, an empty or over 4 KiB
// .conveyor-source or .conveyor-class, one label with two class names, or
// some samples with a .conveyor-class and
// some without (shards of two datasets in one folder).
// A .tar that the folder's manifest (`conveyor pack`'s) does not list is
// refused by name unless `unlisted` is read (check_manifest).
Dataset dataset_from_shards(const std::filesystem::path& dir, UnlistedShards unlisted = UnlistedShards::refuse);

// The dataset `index` describes, its shards at dir / index.shards[s].file:
// what dataset_from_shards makes of a folder once it has its index. Opens
// nothing (the shards need not be there yet). Throws std::invalid_argument for
// labels the index could not hold (negative, over kMaxLabel, outside classes).
Dataset dataset_from_index(const std::filesystem::path& dir, const ShardIndex& index);

}  // namespace conveyor
