// EpochRangeOf<Source, Item>: an input range over the remaining batches of one
// epoch, `for (auto& batch : source.epoch(e))`, for any source whose next()
// returns std::optional<Item> (Pipeline gives BatchHandle, DevicePipeline gives
// DeviceBatch). Dereferencing gives the Item (move it out to keep the batch);
// advancing releases the current batch (Item::reset()) before fetching the next.
// Single-pass; belongs to the source's consumer thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace conveyor {

template <typename Source, typename Item>
class EpochRangeOf {
 public:
  class iterator {
   public:
    using difference_type = std::ptrdiff_t;
    using value_type = Item;
    iterator() = default;
    Item& operator*() { return current_; }
    Item* operator->() { return &current_; }
    iterator& operator++() {
      current_.reset();  // give the batch back before waiting for the next one
      done_ = true;
      if (remaining_ == 0) return *this;
      if (auto b = source_->next()) {
        current_ = std::move(*b);
        --remaining_;
        done_ = false;
      }
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return done_; }

   private:
    friend class EpochRangeOf;
    iterator(Source* source, std::uint64_t remaining) : source_(source), remaining_(remaining) { ++*this; }
    Source* source_ = nullptr;
    std::uint64_t remaining_ = 0;
    Item current_;
    bool done_ = true;
  };

  // `remaining` batches are left in the epoch (the source computes it).
  EpochRangeOf(Source* source, std::uint64_t remaining) : source_(source), remaining_(remaining) {}
  iterator begin() { return iterator(source_, remaining_); }
  std::default_sentinel_t end() { return {}; }
  std::uint64_t size() const { return remaining_; }

 private:
  Source* source_;
  std::uint64_t remaining_;
};

}  // namespace conveyor
