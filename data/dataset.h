// Dataset: an immutable index of samples, each a file path and an integer label,
// read from a list file (`path label` per line) or an ImageFolder-style tree.
// Building one never opens or reads the images themselves.
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

// What Dataset::from_shards does with a .tar the folder's manifest does not
// list (a validation shard copied into a training folder): refuse it by name,
// or read it with the listed ones (--extra-shards, extra_shards=True).
enum class UnlistedShards { refuse, read };

// A bad list file or image folder. what() is one line naming the file, and the line number for
// list files: "data/train.txt:17: label 'x1' is not a non-negative decimal integer".
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  // List file: one sample a line, `path label`. The label is the last whitespace-separated field, a
  // non-negative decimal integer that fits int64; the path is everything before it, trimmed, and may
  // contain spaces. Relative paths resolve against the list file's folder ("parent / path"), each
  // path with its "." segments and doubled slashes taken out ("./a//1.jpg" is "a/1.jpg"; ".." stays,
  // and a path ending in '/' or "/." is kept as written). Lines that are blank or
  // whose first non-blank char is '#' are skipped; CRLF endings and a UTF-8 BOM are accepted, a CR
  // anywhere else (CR-only line ends) is an error.
  // A list with no samples gives size 0. Does not open or stat the images.
  // Throws DatasetError "file:line: reason" for a malformed line (no label, a label that is not a
  // non-negative integer or overflows int64, an empty path, a NUL byte), and "file: reason" for a
  // list file that is missing, a directory or anything else that is not a regular file (a FIFO, a
  // device), unreadable or fails mid-read.
  static Dataset from_list(const std::filesystem::path& list_file);

  // torchvision ImageFolder: root/<class>/.../<image>. Class directories (symlinks followed), sorted
  // by name in byte order, give labels 0..K-1. Inside a class directory files are found recursively,
  // following directory symlinks (a link back to a directory being walked is not entered again), in
  // torchvision's order: by directory path, then by file name. A file is kept when its extension
  // (case-insensitive) is in image_extensions(). Entries whose name starts with '.' are skipped, and
  // so are files directly in root. Never reads image bytes.
  // Throws DatasetError naming the path when root is missing or not a directory, holds no class
  // directory, a directory cannot be listed, or a class holds no image file (naming every such class).
  static Dataset from_folder(const std::filesystem::path& root);

  // WebDataset tar shards: every regular *.tar file directly in dir, in byte
  // order of name, each scanned once (scan_tar: headers only). Members group
  // into samples by key, the member path up to the first '.' of its file name
  // (webdataset's rule: "a/0001.jpg" and "a/0001.cls" are sample "a/0001");
  // a sample is its one image member (an extension from image_extensions(),
  // matched on the part after the key, case-insensitive) labelled by KEY.cls
  // (a decimal integer, blanks around it allowed). `conveyor pack` adds two
  // members, read when present: KEY.conveyor-source, the sample's name where
  // it was packed from (relative_name()), and KEY.conveyor-class, its class's
  // name; classes()
  // comes from them ("" for a label no sample carries). Other members (.json,
  // .txt) are ignored. Samples in shard order, then in the order their keys first
  // appear. Sample i is read with one pread of range(i) from path(i), the shard.
  // Throws DatasetError naming the folder, shard or member: not a directory, no
  // .tar in it, a tar that does not scan (scan_tar's reasons), a key without an
  // image or without .cls, a key with two images (or two of .cls,
  // .conveyor-source, .conveyor-class), a .cls that is not an integer, an empty or over 4 KiB
  // .conveyor-source or .conveyor-class, one label with two class names, or
  // some samples with a .conveyor-class and
  // some without (shards of two datasets in one folder).
  // A .tar that the folder's manifest (`conveyor pack`'s) does not list is
  // refused by name unless `unlisted` is read (shard_index.h, check_manifest).
  static Dataset from_shards(const std::filesystem::path& dir, UnlistedShards unlisted = UnlistedShards::refuse);

  // Builds from vectors, for tests and in-memory use; source() is "". Throws std::invalid_argument
  // when paths and labels differ in length, a label is negative, or classes is non-empty and a label
  // is >= classes.size().
  Dataset(std::vector<std::filesystem::path> paths, std::vector<std::int64_t> labels,
          std::vector<std::string> classes = {});

  // The extensions from_folder keeps, lower case with the dot: ".jpg", ".jpeg", ... Throws nothing.
  static std::span<const std::string_view> image_extensions();
  // Whether `ext` (with its dot: ".JPG") is one of them, ignoring case. Throws nothing.
  static bool is_image_extension(std::string_view ext);

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
  // Sample i's bytes are read through a SampleReader (data/reader.h), never here.
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

 private:
  Dataset() = default;  // empty; the factories fill it in, then call check_labels()
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

}  // namespace conveyor
