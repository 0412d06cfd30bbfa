// MixUp and CutMix on the device (image/mixing.h): a BatchStep for
// TransferConfig::batch_steps that mixes each normalized batch in place, after
// normalize and every earlier step (RandomErasing's), and writes the mixed
// soft labels, as torchvision.transforms.v2's MixUp and CutMix do after the
// collate.
//
//   TransferConfig tc;
//   tc.normalize = TransferConfig::Normalization{224, 224, 3, {}, DType::float16};
//   BatchMixing m;
//   m.mixup = MixUp{0.2};
//   m.cutmix = CutMix{1.0};
//   m.num_classes = 1000;
//   tc.batch_steps.push_back(Mix{m});
//   ...
//   const BatchTensor* soft = batch.extras().tensor(kSoftLabels);  // float32 [N, 1000]
//
// Each batch's draw (which op, lambda, CutMix's box) comes from its own
// stream, Rng(seed ^ kMixSeedSalt, epoch, batch index within the epoch), with
// the pipeline's Config::seed, on the delivery thread: the same for any worker
// count, and a resume repeats it. The kernel (device/kernels/mix.h) runs on
// the normalize stream. What the consumer gets (DeviceBatch::extras):
//   kSoftLabels: float32 [N, num_classes], in a device buffer per slot
//     (unless soft_labels is false: then the integer labels() stay the
//     targets, paired as labels.roll(1, 0), with kMixLambda);
//   kMixLambda: the weight of each sample's own label (CutMix: the box's);
//   kMixCutMix: 1 when the batch took CutMix, else 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "device/device_pipeline.h"
#include "image/mixing.h"

namespace conveyor {

// Keys the batches' streams apart from the samples' Rng(seed, epoch, index).
inline constexpr std::uint64_t kMixSeedSalt = 0xd1b54a32d192ed03ULL;

inline constexpr std::string_view kSoftLabels = "soft_labels";
inline constexpr std::string_view kMixLambda = "mix_lambda";
inline constexpr std::string_view kMixCutMix = "mix_cutmix";

// Copyable settings; each DevicePipeline makes a step of its own from them.
struct Mix {
  BatchMixing mixing;       // num_classes > 0: the labels are 0 .. num_classes - 1
  bool soft_labels = true;  // false: no soft labels; the consumer mixes the losses with kMixLambda

  // The step for one pipeline (TransferConfig::batch_steps calls it at
  // start-up): allocates a device buffer of batch_size x num_classes floats
  // per slot for the soft labels. Throws ConfigError naming MixUp or CutMix
  // without a TransferConfig::normalize (they mix normalized samples) or
  // without num_classes, std::invalid_argument from BatchMixing::validate, DeviceError from
  // the device. A label outside 0 .. num_classes - 1 fails its batch
  // (prepare() throws, naming the sample).
  std::unique_ptr<BatchStep> operator()(const BatchStepSetup& setup) const;
};

}  // namespace conveyor
