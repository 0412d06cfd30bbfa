// SkipLog: the samples a run left out (ErrorPolicy::skip), each distinct
// (sample, reason) kept once with the epochs it was left out of, so that its
// memory is bounded by the dataset, not by the length of the run: a broken
// file skipped in each of 200 epochs is one entry with times = 200.
//
// Thread safety: none; the owner locks (Pipeline holds it under its state mutex).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/batch.h"

namespace conveyor {

class SkipLog {
 public:
  // Adds s (times of them, in epochs s.epoch .. s.last_epoch): a new entry for
  // a (sample, reason) not seen yet, else the seen one's count and epochs grow.
  void add(const SkippedSample& s) {
    total_ += s.times;
    const auto [it, fresh] = where_.try_emplace({s.index, s.reason}, entries_.size());
    const std::uint64_t last = std::max(s.epoch, s.last_epoch);
    if (fresh) {
      entries_.push_back(s);
      entries_.back().last_epoch = last;
      return;
    }
    SkippedSample& e = entries_[it->second];
    e.times += s.times;
    e.epoch = std::min(e.epoch, s.epoch);
    e.last_epoch = std::max(e.last_epoch, last);
  }
  // One entry per distinct (sample, reason), in the order first seen.
  const std::vector<SkippedSample>& entries() const { return entries_; }
  // Every skip, repeats counted (the sum of the entries' times).
  std::uint64_t total() const { return total_; }

 private:
  std::vector<SkippedSample> entries_;
  std::map<std::pair<std::uint64_t, std::string>, std::size_t> where_;  // (index, reason) -> entries_ position
  std::uint64_t total_ = 0;
};

}  // namespace conveyor
