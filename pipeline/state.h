// PipelineState: where a consumer stands in a pipeline's stream, as a value
// that can be written to a checkpoint and read back. Pipeline::state() takes
// it; a new Pipeline given it (with the same config) produces exactly the
// batches that follow, bit-identical.
//
// Thread safety: a plain value; serialize() and parse() touch nothing shared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/sample_order.h"

namespace conveyor {

// Where a consumer stands: enough to resume with exactly the batches that follow.
// Taken by Pipeline::state(); given to a new Pipeline with the same config.
// The settings the order depends on (its base, SampleOrder, and the dataset's
// size) are recorded whole: resuming under others is an error.
struct PipelineState : SampleOrder {
  std::uint64_t epoch = 0;                 // the epoch the next batch belongs to
  std::vector<std::uint64_t> delivered;    // batch indices of that epoch already consumed, sorted
  std::uint64_t dataset_size = 0;

  // One line of text, e.g. "conveyor-state 1 epoch=3 delivered=0-41,43 seed=7 ...".
  std::string serialize() const;
  // Throws std::invalid_argument naming the bad field: also a field given
  // twice, and a delivered batch past the ceil(dataset_size / batch_size) an
  // epoch can have (so an edited line cannot make it allocate more).
  static PipelineState parse(const std::string& text);
  // The settings (not the position) this state and `here` disagree on, as
  // "seed=11 there, 12 here, batch_size=..."; "" when they agree.
  std::string setting_differences(const PipelineState& here) const;
  bool operator==(const PipelineState&) const = default;
};

}  // namespace conveyor
