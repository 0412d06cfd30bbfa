#include "data/reader.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace conveyor {

// Shards kept open for every worker (pread needs no shared position), most
// recent first: a shard is opened once, not once per sample, up to
// ImageConfig::max_open_shards descriptors; beyond that the least recently
// used is closed (once the readers holding it are done).
class SampleReader::OpenShards {
 public:
  explicit OpenShards(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}
  // The shard's descriptor, opened and kept when it is not open yet. A full
  // cache closes its least recently used entry for it (evict, the workers'
  // reads), or (read-ahead advice, which must never close a shard a worker
  // uses) returns null rather than open, or keeps nothing when it filled
  // during the open.
  enum class Full { evict, keep };
  std::shared_ptr<File> get(FileSystem& files, std::string_view path, Full when_full = Full::evict) {
    {
      std::lock_guard lk(mu_);
      if (auto f = find(path)) return f;
      if (when_full == Full::keep && open_.size() >= capacity_) return nullptr;
    }
    std::shared_ptr<File> file = files.open(std::filesystem::path(path));  // outside the lock: a slow open stalls no one
    std::lock_guard lk(mu_);
    if (auto f = find(path)) return f;  // another worker opened it meanwhile: one entry per shard
    if (open_.size() >= capacity_) {
      if (when_full == Full::keep) return file;  // use this one, cache none
      open_.pop_back();
    }
    open_.insert(open_.begin(), {std::string(path), file});
    return file;
  }

 private:
  // The entry for path, moved to the front; null when absent. Under mu_.
  std::shared_ptr<File> find(std::string_view path) {
    for (std::size_t i = 0; i < open_.size(); ++i) {
      if (open_[i].first == path) {
        std::rotate(open_.begin(), open_.begin() + std::ptrdiff_t(i), open_.begin() + std::ptrdiff_t(i) + 1);
        return open_.front().second;
      }
    }
    return nullptr;
  }

  std::mutex mu_;
  const std::size_t capacity_;
  std::vector<std::pair<std::string, std::shared_ptr<File>>> open_;
};

SampleReader::SampleReader(const Dataset& dataset, std::shared_ptr<FileSystem> files, std::uint64_t max_bytes,
                           std::size_t max_open_shards)
    : dataset_(dataset),
      files_(files ? std::move(files) : dataset.files() ? dataset.files() : posix_file_system()),
      max_bytes_(max_bytes),
      shards_(std::make_unique<OpenShards>(max_open_shards)) {}

SampleReader::~SampleReader() = default;

void SampleReader::read(std::size_t i, std::vector<unsigned char>& out, const std::atomic<bool>* stopping) const {
  if (const auto range = dataset_.range(i)) {  // a shard member: one pread from a shard kept open
    const std::shared_ptr<File> shard = shards_->get(*files_, dataset_.path_view(i));
    read_file_range(*shard, range->offset, range->size, max_bytes_, out, stopping);
    return;
  }
  read_whole_file(*files_, dataset_.path(i), max_bytes_, out, stopping);
}

void SampleReader::advise(std::span<const std::uint64_t> indices) const noexcept {
  for (const std::uint64_t i : indices) {
    if (i >= dataset_.size()) continue;
    try {
      const auto range = dataset_.range(i);
      if (!range) continue;
      if (auto shard = shards_->get(*files_, dataset_.path_view(i), OpenShards::Full::keep)) {
        shard->will_need(range->offset, range->size);
      }
    } catch (const std::exception&) {  // advice: the sample's own read reports it
    }
  }
}

}  // namespace conveyor
