#include "pipeline/plan.h"

namespace conveyor {

Plan::Plan(std::uint64_t batches_per_epoch, std::uint64_t first_epoch, std::vector<std::uint64_t> first_epoch_batches,
           std::uint64_t end_epoch)
    : per_epoch_(batches_per_epoch), first_epoch_(first_epoch), first_(std::move(first_epoch_batches)) {
  if (per_epoch_ == 0 || (end_epoch != kUnbounded && first_epoch_ >= end_epoch)) {
    total_ = 0;
  } else if (end_epoch == kUnbounded) {
    total_ = kUnbounded;
  } else {
    total_ = first_.size() + (end_epoch - first_epoch_ - 1) * per_epoch_;
  }
}

Plan::Pos Plan::at(std::uint64_t g) const {
  if (g < first_.size()) return {first_epoch_, first_[g]};
  const std::uint64_t rest = g - first_.size();
  return {first_epoch_ + 1 + rest / per_epoch_, rest % per_epoch_};
}

std::uint64_t Plan::epoch_end(std::uint64_t g) const {
  if (g < first_.size()) return first_.size();
  return first_.size() + ((g - first_.size()) / per_epoch_ + 1) * per_epoch_;
}

}  // namespace conveyor
