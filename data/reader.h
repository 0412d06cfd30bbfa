// SampleReader: the one way a Dataset's samples are read as bytes, shared by
// many threads at once. A list or folder sample is its whole file; a shard
// sample is one pread of its byte range from a shard kept open, so a shard is
// opened once, not once per sample: up to max_open_shards descriptors, the
// least recently used closed beyond that (once the reads holding it are done).
// The image filler, `conveyor pack` and `inspect`, and the GPU share's
// measurement all read through one.
//
//   SampleReader reader(dataset, posix_file_system(), DecodeLimits{}.max_file_bytes);
//   std::vector<unsigned char> bytes;
//   reader.read(i, bytes);            // from any thread, each with its own buffer
//
// Thread safety: read() and advise() may run concurrently. The Dataset and the
// FileSystem must outlive the reader (it keeps a reference to the first).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "data/dataset.h"
#include "data/file_system.h"

namespace conveyor {

class SampleReader {
 public:
  // Default for max_open_shards: 256 shard files open at once.
  static constexpr std::size_t kDefaultMaxOpenShards = 256;
  // `files` null: the dataset's files(), else posix_file_system(). max_open_shards 0 is taken as 1.
  SampleReader(const Dataset& dataset, std::shared_ptr<FileSystem> files, std::uint64_t max_bytes,
               std::size_t max_open_shards = kDefaultMaxOpenShards);
  ~SampleReader();
  SampleReader(const SampleReader&) = delete;
  SampleReader& operator=(const SampleReader&) = delete;

  // Sample i's bytes into out (resized to them): the whole file, or its range
  // of the shard. Throws what read_whole_file and read_file_range throw (the
  // reason, without the sample's name: the caller names it), std::out_of_range
  // for i >= dataset.size(), ReadCancelled when *stopping is set during the read.
  void read(std::size_t i, std::vector<unsigned char>& out, const std::atomic<bool>* stopping = nullptr) const;

  // Advice that samples `indices` will be read soon: for a shard member,
  // WILLNEED on its byte range through the shard descriptor the readers share
  // (opened if the cache has room; advice never closes one a read uses), so
  // the read is under way while the batch before decodes. A file per sample
  // gets none: advice would cost an open of its own, the very cost shards
  // remove. Indices past the dataset are ignored; errors are left to the
  // sample's own read. Throws nothing.
  void advise(std::span<const std::uint64_t> indices) const noexcept;

  const Dataset& dataset() const { return dataset_; }
  FileSystem& files() const { return *files_; }

 private:
  class OpenShards;
  const Dataset& dataset_;
  std::shared_ptr<FileSystem> files_;
  std::uint64_t max_bytes_;
  std::unique_ptr<OpenShards> shards_;
};

}  // namespace conveyor
