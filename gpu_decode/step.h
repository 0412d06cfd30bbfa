// The GPU decode path's step in the transfer stage: the samples an ImageSource
// with gpu_share left undecoded (its deferred_decodes()) are decoded by a
// GpuDecodeFeed (gpu_decode/feed.h): `threads` threads of its own take each
// batch as the workers complete it and decode it on one of `decoders`
// (create_jpeg_decoder) on that decoder's stream, ahead of the delivery
// thread, which renders the decoded images into the batch's slot after its
// copy and before its copied event (a BatchStep, device/device_pipeline.h), so
// the consumer's protocol is unchanged. Samples must be the uint8 HWC of the
// geometry's output. A file the decoder refuses is decoded again on the CPU
// (the host twin, on the delivery thread) alone; one that fails there too
// follows on_error: fail stops the pipeline with the file's name, skip leaves
// it out of its batch (Batch::skipped).
//
//   TransferConfig tc;
//   tc.batch_steps.push_back(GpuDecode{source.deferred_decodes(), decoders, ErrorPolicy::fail});
//   DevicePipeline p(config, n, fill, tc, device);
//   ... gpu_decode_counts(p).decoded
//
// One pipeline at a time per source: the step attaches the deferred store
// while its DevicePipeline lives (dropping entries an earlier one left), and
// the source defers only while one is attached.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/device_pipeline.h"
#include "gpu_decode/jpeg_batch_decoder.h"
#include "image/gpu_decode_plan.h"
#include "image/image_source.h"  // ErrorPolicy

namespace conveyor {

// The GPU decode path's settings, and the maker of its step: add one to
// TransferConfig::batch_steps. Copyable; each DevicePipeline makes a step of
// its own from it.
struct GpuDecode {
  std::shared_ptr<DeferredDecodes> deferred;  // required: the source's deferred_decodes()
  // One or more; a decoder holds a batch from its decode until its render is
  // done, so with two or more the next batch decodes while one renders.
  std::vector<std::shared_ptr<JpegBatchDecoder>> decoders;
  ErrorPolicy on_error = ErrorPolicy::fail;
  DecodeLimits limits;  // the CPU fall-back's: the source's ImageConfig::limits
  // The feed's threads, 1 .. decoders.size(). Default: 0, one per two decoders.
  std::size_t threads = 0;

  // The step for one pipeline (TransferConfig::batch_steps calls it at
  // start-up): attaches `deferred`, starts the feed. Throws ConfigError naming
  // gpu_decode.deferred or gpu_decode.decoders when one is missing,
  // DeviceError from the device.
  std::unique_ptr<BatchStep> operator()(const BatchStepSetup& setup) const;
};

// The GPU decode settings `transfer` carries (its first GpuDecode among
// batch_steps); null when it has none.
const GpuDecode* gpu_decode_of(const TransferConfig& transfer);

// The GPU decode path so far: samples its decoder rendered, and those it
// refused that the CPU then decoded.
struct GpuDecodeCounts {
  std::uint64_t decoded = 0, cpu_fallbacks = 0;
};
// `pipeline`'s counts; zero when it has no GPU decode step. Thread-safe.
GpuDecodeCounts gpu_decode_counts(const DevicePipeline& pipeline);

}  // namespace conveyor
