// The training run's held-out split and its pass: split() holds out a share of
// each class, seeded; Validation is the split's pipeline, built once for the
// run; validate() scores the model on one pass of it.
//
// Thread safety: the training thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "apps/options.h"
#include "device/device_pipeline.h"
#include "libtorch/models.h"
#include "data/dataset.h"
#include "image/image_source.h"

namespace conveyor::apps {

// Per class, a seeded shuffle of its samples; the first round(fraction * n) of
// each go to validation (at least one when fraction > 0 and the class has two,
// and never the class's last one: every class is trained on).
void split(const Dataset& all, double fraction, std::uint64_t seed, Dataset& train, Dataset& val);

struct ValResult {
  double loss = 0, accuracy = 0;
  std::size_t images = 0, skipped = 0;
};

// The validation split's pipeline, built once for the run, so its pool is
// allocated (pinned, on CUDA) once rather than at every pass: one epoch of it
// per pass. Between passes its workers prefetch the next pass, as far as the
// pool allows. Resize + CenterCrop, no shuffle; every rank scores the whole split.
struct Validation {
  ImageSource images;     // before the pipeline, whose filler refers to it
  DevicePipeline pipeline;
  std::uint64_t passes = 0;  // epochs of `pipeline` read so far

  Validation(const Dataset& val, const Options& o, int crop, std::size_t passes_this_run,
             const std::shared_ptr<Device>& device, const TransferConfig& tc)
      : images(val, center_config(o, crop), o.workers),
        pipeline(config(o, images, passes_this_run), val.size(), images.filler(), tc, device) {}

  static Config config(const Options& o, const ImageSource& images, std::size_t passes);
  // Resize + CenterCrop at crop x crop whatever --augment or --transforms
  // says: those are the training split's.
  static ImageConfig center_config(const Options& o, int crop);
};

// One pass over the validation split, with no gradients; none without a split
// (`val` null).
ValResult validate(Net& model, Validation* val, const torch::Device& where);

}  // namespace conveyor::apps
