// Dataset: an immutable index of samples, each a file path and an integer label,
// read from a list file (`path label` per line) or an ImageFolder-style tree.
// Building one never opens or reads the images themselves.
//
// Memory: the paths are packed into one contiguous buffer with an offset table, so a sample costs
// its path's length in bytes plus 16 (an 8-byte end offset and an 8-byte label), with no per-sample
// heap allocation: about 68 bytes for a 52-byte path. While a list or folder loads, the growing
// buffer briefly needs up to about twice that. path(i) builds (allocates and parses) a new
// std::filesystem::path on every call; path_view(i) reads a path without allocating.
//
// Thread safety: immutable after construction; every method is const and safe to
// call from many threads at once. The Dataset owns its paths and class names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

// A bad list file or image folder. what() is one line naming the file, and the line number for
// list files: "data/train.txt:17: label 'x1' is not a non-negative integer".
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  // List file: one sample a line, `path label`. The label is the last whitespace-separated field, a
  // non-negative decimal integer that fits int64; the path is everything before it, trimmed, and may
  // contain spaces. Relative paths resolve against the list file's folder. Lines that are blank or
  // whose first non-blank char is '#' are skipped; CRLF endings and a UTF-8 BOM are accepted.
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

  // Builds from vectors, for tests and in-memory use; source() is "". Throws std::invalid_argument
  // when paths and labels differ in length, a label is negative, or classes is non-empty and a label
  // is >= classes.size().
  Dataset(std::vector<std::filesystem::path> paths, std::vector<std::int64_t> labels,
          std::vector<std::string> classes = {});

  // The extensions from_folder keeps, lower case with the dot: ".jpg", ".jpeg", ... Throws nothing.
  static std::span<const std::string_view> image_extensions();

  // Throws nothing.
  std::size_t size() const { return path_ends_.size(); }
  // Sample i's path (a new object each call, by value) and label. Throw std::out_of_range unless
  // i < size().
  std::filesystem::path path(std::size_t i) const { return std::filesystem::path(path_view(i)); }
  std::int64_t label(std::size_t i) const { return labels_.at(i); }
  // Sample i's path as its native() bytes, without allocating. The view points into this Dataset and
  // is invalidated when the Dataset is destroyed, moved from or assigned to. Throws std::out_of_range
  // unless i < size().
  std::string_view path_view(std::size_t i) const {
    if (i >= path_ends_.size()) throw_out_of_range(i);
    const std::uint64_t begin = i == 0 ? 0 : path_ends_[i - 1];
    return {path_chars_.data() + begin, static_cast<std::size_t>(path_ends_[i] - begin)};
  }
  // Folder datasets: the class names, index = label. List datasets: empty. Throws nothing.
  const std::vector<std::string>& classes() const { return classes_; }
  // Max label + 1; 0 for an empty dataset. Throws nothing.
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

  // Every path's native() bytes, back to back, no separators. Sample i's path is the bytes
  // [path_ends_[i - 1], path_ends_[i]) (from 0 for i == 0); path_ends_.size() == size().
  std::string path_chars_;
  std::vector<std::uint64_t> path_ends_;
  std::vector<std::int64_t> labels_;
  std::vector<std::string> classes_;
  std::filesystem::path source_;
  std::int64_t num_classes_ = 0;
};

}  // namespace conveyor
