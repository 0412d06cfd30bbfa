#include "data/dataset.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "pipeline/fnv1a.h"

namespace conveyor {

namespace fs = std::filesystem;

Dataset::Dataset(std::vector<fs::path> paths, std::vector<std::int64_t> labels, std::vector<std::string> classes)
    : labels_(std::move(labels)), classes_(std::move(classes)) {
  if (paths.size() != labels_.size()) {
    throw std::invalid_argument("dataset: " + std::to_string(paths.size()) + " paths but " +
                                std::to_string(labels_.size()) + " labels");
  }
  check_labels();
  std::size_t bytes = 0;
  for (const fs::path& p : paths) bytes += p.native().size();
  path_chars_.reserve(bytes);
  path_ends_.reserve(paths.size());
  for (const fs::path& p : paths) add_path(p.native());
}

void Dataset::add_path(std::string_view native) {
  path_chars_.append(native);
  path_ends_.push_back(path_chars_.size());
}

void Dataset::check_labels() {
  std::int64_t max_label = -1;
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    const std::int64_t l = labels_[i];
    if (l < 0) {
      throw std::invalid_argument("dataset: sample " + std::to_string(i) + " has negative label " + std::to_string(l));
    }
    if (l > kMaxLabel) {
      throw std::invalid_argument("dataset: sample " + std::to_string(i) + " has label " + std::to_string(l) +
                                  ", above the maximum " + std::to_string(kMaxLabel));
    }
    if (!classes_.empty() && static_cast<std::uint64_t>(l) >= classes_.size()) {
      throw std::invalid_argument("dataset: sample " + std::to_string(i) + " has label " + std::to_string(l) +
                                  " but there are only " + std::to_string(classes_.size()) + " classes");
    }
    max_label = std::max(max_label, l);
  }
  num_classes_ = max_label + 1;
}

std::optional<Dataset::ByteRange> Dataset::range(std::size_t i) const {
  if (i >= size()) throw_out_of_range(i);
  if (ranges_.empty()) return std::nullopt;
  return ranges_[i];
}

std::string Dataset::name(std::size_t i) const {
  if (i >= size()) throw_out_of_range(i);
  if (shards_.empty()) return std::string(stored_path(i));
  std::string out = shards_[shard_of_[i]].string() + ":" + std::string(stored_path(i));
  if (const std::string_view s = source(i); !s.empty()) out.append(" (").append(s).append(")");
  return out;
}

std::size_t Dataset::common_folder() const {
  // name(i) without an allocation per sample for files (their stored path);
  // a shard's "shard.tar:member" is built in one reused buffer.
  std::string buffer;
  const auto name_of = [&](std::size_t i) -> std::string_view {
    if (shards_.empty()) return stored_path(i);
    buffer.assign(shards_[shard_of_[i]].native()).append(":").append(stored_path(i));
    return buffer;
  };
  std::optional<std::string> first;
  std::size_t n = 0;  // bytes every name shares so far
  for (std::size_t i = 0; i < size(); ++i) {
    if (!source(i).empty()) continue;
    const std::string_view name = name_of(i);
    if (!first) {
      first = std::string(name);
      n = name.size();
      continue;
    }
    std::size_t k = 0;
    while (k < n && k < name.size() && name[k] == (*first)[k]) ++k;
    n = k;
    if (n == 0) break;
  }
  const std::size_t slash = n == 0 ? std::string::npos : first->rfind('/', n - 1);
  return slash == std::string::npos ? 0 : slash + 1;
}

std::string Dataset::relative_name(std::size_t i, std::size_t folder) const {
  if (i >= size()) throw_out_of_range(i);
  if (const std::string_view s = source(i); !s.empty()) return std::string(s);
  if (shards_.empty()) {
    const std::string_view path = stored_path(i);
    return std::string(folder <= path.size() ? path.substr(folder) : path);
  }
  const std::string name = this->name(i);  // "shard.tar:member": it has no source
  return folder <= name.size() ? name.substr(folder) : name;
}

std::uint64_t Dataset::name_digest() const {
  Fnv1a h;
  const std::size_t folder = common_folder();
  for (std::size_t i = 0; i < size(); ++i) {
    const std::string name = relative_name(i, folder);
    h.add(name.data(), name.size());
    h.add("", 1);  // a separator: "ab"+"c" differs from "a"+"bc"
    h.add_value(label(i));
  }
  return h.value;
}

Dataset Dataset::subset(std::span<const std::size_t> indices) const {
  Dataset d;
  d.classes_ = classes_;
  d.source_ = source_;
  d.shards_ = shards_;
  d.files_ = files_;
  for (const std::size_t i : indices) {
    if (i >= size()) throw_out_of_range(i);
    d.add_path(stored_path(i));
    d.labels_.push_back(labels_[i]);
    if (!shards_.empty()) {
      d.shard_of_.push_back(shard_of_[i]);
      d.ranges_.push_back(ranges_[i]);
    }
    if (!source_ends_.empty()) d.add_source(source(i));
  }
  d.check_labels();
  d.num_classes_ = std::max(d.num_classes_, num_classes_);  // a part keeps the whole's label space
  return d;
}

Dataset Dataset::rank_subset(std::size_t rank, std::size_t world_size, ShardPolicy policy) const {
  if (shards_.empty()) throw std::invalid_argument("dataset: rank by shard needs a shard dataset (--shards)");
  if (world_size == 0 || rank >= world_size) {
    throw std::invalid_argument("dataset: rank " + std::to_string(rank) + " of " + std::to_string(world_size));
  }
  if (shards_.size() < world_size) {
    throw std::invalid_argument("dataset: " + std::to_string(shards_.size()) + " shards cannot go whole to " +
                                std::to_string(world_size) + " ranks; shard by sample instead");
  }
  std::vector<std::size_t> count(world_size), mine;
  for (std::size_t i = 0; i < size(); ++i) {
    const std::size_t r = shard_of_[i] % world_size;
    ++count[r];
    if (r == rank) mine.push_back(i);
  }
  // A rank whose shards hold no sample would have nothing to pad from: it would
  // run zero steps while the others wait for it (a hung collective). Every
  // rank finds the same count, so every rank refuses alike.
  if (const auto empty = std::find(count.begin(), count.end(), std::size_t{0}); empty != count.end()) {
    const std::size_t r = std::size_t(empty - count.begin());
    std::string names;
    for (std::size_t k = r; k < shards_.size(); k += world_size) {
      names += (names.empty() ? "" : ", ") + shards_[k].filename().string();
    }
    throw std::invalid_argument("dataset: rank " + std::to_string(r) + " of " + std::to_string(world_size) +
                                " would get no samples: its shards (" + names +
                                ") hold none; remove the empty shards or shard by sample instead");
  }
  const std::size_t target = policy == ShardPolicy::pad ? *std::max_element(count.begin(), count.end())
                                                        : *std::min_element(count.begin(), count.end());
  if (mine.size() > target) mine.resize(target);
  for (std::size_t k = 0; mine.size() < target && !mine.empty(); ++k) {
    const std::size_t again = mine[k];  // pad: repeat from the head
    mine.push_back(again);
  }
  return subset(mine);
}

void Dataset::throw_out_of_range(std::size_t i) const {
  throw std::out_of_range("dataset: sample index " + std::to_string(i) + " is out of range (size " +
                          std::to_string(size()) + ")");
}

void DatasetBuilder::add_file(std::string_view prefix, std::string_view path, std::int64_t label) {
  d_.path_chars_.append(prefix);  // part of this sample's path
  d_.add_path(path);
  d_.labels_.push_back(label);
}

std::uint32_t DatasetBuilder::add_container(fs::path file) {
  if (d_.shards_.size() >= std::numeric_limits<std::uint32_t>::max()) throw std::length_error("dataset: too many shards");
  d_.shards_.push_back(std::move(file));
  return static_cast<std::uint32_t>(d_.shards_.size() - 1);
}

void DatasetBuilder::add_member(std::uint32_t container, std::string_view member, Dataset::ByteRange range,
                                std::int64_t label, std::string_view source) {
  if (container >= d_.shards_.size()) {
    throw std::out_of_range("dataset: shard " + std::to_string(container) + " was never added");
  }
  d_.add_path(member);
  d_.labels_.push_back(label);
  d_.shard_of_.push_back(container);
  d_.ranges_.push_back(range);
  d_.add_source(source);
}

Dataset DatasetBuilder::build(fs::path source) {
  Dataset d = std::move(d_);
  d_ = Dataset();
  if (d.source_chars_.empty()) {  // no member has a source: source(i) is "" for all without the table
    d.source_chars_.clear();
    d.source_ends_.clear();
    d.source_ends_.shrink_to_fit();
  }
  d.path_chars_.shrink_to_fit();
  d.path_ends_.shrink_to_fit();
  d.labels_.shrink_to_fit();
  d.check_labels();
  d.source_ = std::move(source);
  return d;
}

}  // namespace conveyor
