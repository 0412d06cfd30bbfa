// RandomErasing on the device (image/random_erasing.h): a BatchStep for
// TransferConfig::batch_steps that erases one rectangle of each chosen sample
// of the normalized batch, after normalize and before the slot counts as
// copied, as torchvision's RandomErasing follows Normalize.
//
//   TransferConfig tc;
//   tc.normalize = TransferConfig::Normalization{224, 224, 3, {}, DType::float16};
//   tc.batch_steps.push_back(Erase{RandomErasing{0.25}});
//
// Each sample's rectangle is drawn on the delivery thread from its own stream,
// Rng(seed ^ kEraseSeedSalt, epoch, index) with the pipeline's Config::seed
// (BatchStepSetup::seed), so the bytes depend on (seed,
// epoch, index) alone: the same for any worker count, and a resume repeats
// them. The rectangles cross to the device in one small copy per batch on the
// normalize stream, from a pinned buffer per slot, then the erase kernel
// (device/kernels/erase.h) writes them.
#pragma once

#include <cstdint>
#include <memory>

#include "device/device_pipeline.h"
#include "image/random_erasing.h"

namespace conveyor {

// Keys the rectangles' streams apart from the augment's Rng(seed, epoch, index).
inline constexpr std::uint64_t kEraseSeedSalt = 0x9e3779b97f4a7c15ULL;

// Copyable settings; each DevicePipeline makes a step of its own from them.
struct Erase {
  RandomErasing erasing;

  // The step for one pipeline (TransferConfig::batch_steps calls it at
  // start-up): allocates a pinned and a device buffer of batch_size
  // rectangles per slot. Throws ConfigError naming RandomErasing without a
  // TransferConfig::normalize (it erases normalized samples), what
  // RandomErasing::validate throws, DeviceError from the device.
  std::unique_ptr<BatchStep> operator()(const BatchStepSetup& setup) const;
};

}  // namespace conveyor
