// Dataset: an immutable index of samples, each a stored name, an integer label
// and, for samples stored inside a larger file (a tar shard), that file and the
// byte range in it. It does no I/O: each storage format reads its own into one,
// through a DatasetBuilder, and never opens the images themselves:
//
//   data/files/list_file.h      a list file, `path label` per line
//   data/files/image_folder.h   an ImageFolder-style tree
//   data/shards/shard_dataset.h WebDataset tar shards (conveyor pack's, or anyone's)
//
// Sample i's bytes are read through a SampleReader (data/reader.h).
//
// Memory: the paths are packed into one contiguous buffer with an offset table, so a sample costs
// its path's length in bytes plus 16 (an 8-byte end offset and an 8-byte label), with no per-sample
// heap allocation: about 68 bytes for a 52-byte path (shards `conveyor pack` wrote: plus 8 and the
// source name's length). While a list or folder loads, the growing
// buffer briefly needs up to about twice that. path(i) builds (allocates and parses) a new
// std::filesystem::path on every call; path_view(i) reads a path without allocating.
//
// Thread safety: immutable after construction; every method is const and safe to
// call from many threads at once. The Dataset owns its paths and class names.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/sampler.h"
#include "data/label.h"

namespace conveyor {

class FileSystem;

// A bad list file, image folder or shard folder. what() is one line naming the file, and the line
// number for list files: "data/train.txt:17: label 'x1' is not a non-negative decimal integer".
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  // Builds from vectors, for tests and in-memory use; source() is "". Throws std::invalid_argument
  // when paths and labels differ in length, a label is negative, or classes is non-empty and a label
  // is >= classes.size().
  Dataset(std::vector<std::filesystem::path> paths, std::vector<std::int64_t> labels,
          std::vector<std::string> classes = {});

  // Throws nothing.
  std::size_t size() const { return path_ends_.size(); }
  // Sample i's path (a new object each call, by value): the file to read, which for a shard
  // dataset is the sample's shard. Throw std::out_of_range unless i < size().
  std::filesystem::path path(std::size_t i) const { return std::filesystem::path(path_view(i)); }
  // Where sample i's bytes lie inside path(i) (shard datasets); empty: the whole file. Throws
  // std::out_of_range unless i < size().
  struct ByteRange {
    std::uint64_t offset = 0, size = 0;
  };
  std::optional<ByteRange> range(std::size_t i) const;
  // Sample i for messages: its path, or for a shard dataset "shard.tar:member", followed by
  // " (source)" when pack recorded one. Throws std::out_of_range unless i < size().
  std::string name(std::size_t i) const;
  // Sample i's file as stored: its path, or for a shard dataset its member's name
  // ("000000001.jpg"). The view lives as long as the Dataset. Throws std::out_of_range.
  std::string_view member(std::size_t i) const {
    if (i >= path_ends_.size()) throw_out_of_range(i);
    return stored_path(i);
  }
  // Sample names that stay the same wherever a dataset lies and however it is
  // stored, for `conveyor pack` to record and for a resume to compare:
  // common_folder() is how many leading bytes every name() (of the samples
  // with no recorded source) shares, up to and with its last shared '/';
  // relative_name(i, that) is sample i's name() without them, or the source
  // that pack recorded. So "train/cat/1.jpg" of a folder, "/data/train/cat/1.jpg"
  // of a list, and the shards pack made of either all give "cat/1.jpg".
  // common_folder() reads every name; throws nothing. relative_name throws
  // std::out_of_range unless i < size().
  std::size_t common_folder() const;
  std::string relative_name(std::size_t i, std::size_t folder) const;
  // FNV-1a (pipeline/fnv1a.h) over every sample's relative_name() and label:
  // the dataset a saved position belongs to, wherever it lies and however it
  // is stored (Python's state_dict, `train`'s checkpoints). Throws bad_alloc only.
  std::uint64_t name_digest() const;
  // The samples `indices` (each < size(), any order, repeats allowed) as a dataset of their own,
  // with their labels, classes and shard ranges; its num_classes() is this dataset's (a part
  // keeps the whole's label space: every rank's model has a row per class). Throws
  // std::out_of_range for an index >= size().
  Dataset subset(std::span<const std::size_t> indices) const;
  // Shard datasets: whole shards per rank, for locality (each rank opens only its own shards):
  // shard s goes to rank s % world_size, and the rank's samples keep their order. Ranks' counts
  // differ with their shards'; `policy` evens them as the sampler does for samples: pad repeats
  // the rank's first samples up to the largest rank's count, drop cuts every rank to the
  // smallest's. Before padding every sample is in exactly one rank's subset. Run the pipeline
  // over it as rank 0 of 1. Throws std::invalid_argument for a dataset that is not sharded,
  // rank >= world_size, or fewer shards than ranks (then shard by sample instead).
  Dataset rank_subset(std::size_t rank, std::size_t world_size, ShardPolicy policy) const;
  std::int64_t label(std::size_t i) const { return labels_.at(i); }
  // Sample i's path as its native() bytes, without allocating. The view points into this Dataset and
  // is invalidated when the Dataset is destroyed, moved from or assigned to. Throws std::out_of_range
  // unless i < size().
  std::string_view path_view(std::size_t i) const {
    if (i >= path_ends_.size()) throw_out_of_range(i);
    if (!shards_.empty()) return shards_[shard_of_[i]].native();
    return stored_path(i);
  }
  // Folder datasets: the class names, index = label. List datasets: empty. Throws nothing.
  const std::vector<std::string>& classes() const { return classes_; }
  // Max label + 1 (of the whole, for a subset()); 0 for an empty dataset. Throws nothing.
  std::int64_t num_classes() const { return num_classes_; }
  // Where it came from, for reports: the list file or the root folder as given; "" when built from
  // vectors. Throws nothing.
  const std::filesystem::path& source() const { return source_; }
  // Where the samples' bytes are read from: null for the local file system
  // (posix_file_system()), or the FileSystem of remote shards still arriving
  // (data/remote/streaming_shards.h). SampleReader and ImageSource read
  // through it unless given another. Subsets keep it. Throws nothing.
  const std::shared_ptr<FileSystem>& files() const { return files_; }
  // This dataset, its bytes read through `files`. Throws nothing.
  Dataset with_files(std::shared_ptr<FileSystem> files) && {
    files_ = std::move(files);
    return std::move(*this);
  }

 private:
  friend class DatasetBuilder;
  Dataset() = default;  // empty; a DatasetBuilder fills it in, then calls check_labels()
  // Appends one path's native() bytes as the next sample's path.
  void add_path(std::string_view native);
  // Validates labels_ against classes_ and sets num_classes_; throws std::invalid_argument.
  void check_labels();
  [[noreturn]] void throw_out_of_range(std::size_t i) const;

  // Sample i's bytes in path_chars_: its path, or its member name in a shard dataset.
  std::string_view stored_path(std::size_t i) const {
    const std::uint64_t begin = i == 0 ? 0 : path_ends_[i - 1];
    return {path_chars_.data() + begin, static_cast<std::size_t>(path_ends_[i] - begin)};
  }

  // Every path's native() bytes (shard datasets: member names), back to back, no separators. Sample i's path is the bytes
  // [path_ends_[i - 1], path_ends_[i]) (from 0 for i == 0); path_ends_.size() == size().
  std::string path_chars_;
  std::vector<std::uint64_t> path_ends_;
  std::vector<std::int64_t> labels_;
  std::vector<std::string> classes_;
  std::filesystem::path source_;
  std::int64_t num_classes_ = 0;
  // Shard datasets only (empty otherwise): the shard files, each sample's shard and byte range.
  std::vector<std::filesystem::path> shards_;
  std::vector<std::uint32_t> shard_of_;
  std::vector<ByteRange> ranges_;
  std::shared_ptr<FileSystem> files_;
  // Shards that carry KEY.conveyor-source only (empty otherwise): sample i's source is
  // source_chars_[source_ends_[i - 1], source_ends_[i]), "" when it has none.
  std::string source_chars_;
  std::vector<std::uint64_t> source_ends_;
  std::string_view source(std::size_t i) const {
    if (source_ends_.empty()) return {};
    const std::uint64_t begin = i == 0 ? 0 : source_ends_[i - 1];
    return {source_chars_.data() + begin, static_cast<std::size_t>(source_ends_[i] - begin)};
  }
  void add_source(std::string_view s) {
    source_chars_.append(s);
    source_ends_.push_back(source_chars_.size());
  }
};

// How a storage format fills a Dataset, one sample at a time, without an
// allocation per sample. A dataset holds either files (add_file) or members of
// container files (add_container, then add_member), not both. Single-threaded;
// build() leaves the builder empty.
class DatasetBuilder {
 public:
  // The next sample: the file `prefix + path` (prefix: "" or a folder ending in
  // '/'), with its label. Throws bad_alloc only.
  void add_file(std::string_view prefix, std::string_view path, std::int64_t label);
  // A container file (a tar shard) that add_member's samples lie in; returns its
  // number for add_member. Throws std::length_error past 2^32 containers.
  std::uint32_t add_container(std::filesystem::path file);
  // The next sample: `member` of container `container`, at `range` in it, with
  // its label and the name it was packed from ("" for none; see
  // Dataset::relative_name). Throws std::out_of_range for an unknown container.
  void add_member(std::uint32_t container, std::string_view member, Dataset::ByteRange range, std::int64_t label,
                  std::string_view source);
  // Class names, index = label (empty: none known).
  void set_classes(std::vector<std::string> classes) { d_.classes_ = std::move(classes); }
  // The dataset, whose source() is `source`. Throws std::invalid_argument for a
  // negative label, one above kMaxLabel, or one outside the classes given.
  Dataset build(std::filesystem::path source);

 private:
  Dataset d_;
};

}  // namespace conveyor
