// Plan: the run's batch sequence, position g -> (epoch, batch index), as the
// workers claim it. Pure arithmetic over the batches per epoch, the resumed
// epoch's remaining batches and the end epoch.
//
// Thread safety: immutable after construction; every method is const.
#pragma once

#include <cstdint>
#include <vector>

namespace conveyor {

// The run's batch sequence: position g -> (epoch, batch index), starting where a
// resumed state left off. Pure arithmetic; exposed for tests.
class Plan {
 public:
  static constexpr std::uint64_t kUnbounded = ~std::uint64_t{0};
  struct Pos {
    std::uint64_t epoch, batch;
  };
  // end_epoch: first epoch not produced (kUnbounded for no end).
  Plan(std::uint64_t batches_per_epoch, std::uint64_t first_epoch, std::vector<std::uint64_t> first_epoch_batches,
       std::uint64_t end_epoch);
  std::uint64_t total() const { return total_; }  // kUnbounded for no end
  Pos at(std::uint64_t g) const;
  // The first position of the epoch after the one holding g.
  std::uint64_t epoch_end(std::uint64_t g) const;

 private:
  std::uint64_t per_epoch_, first_epoch_;
  std::vector<std::uint64_t> first_;
  std::uint64_t total_;
};

}  // namespace conveyor
