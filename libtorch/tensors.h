// LibTorch tensors over Conveyor's batches, without a copy.
//
//   DevicePipeline pipeline(config, dataset.size(), images.filler(), transfer, device);
//   while (auto batch = pipeline.next()) {
//     TensorBatch t = to_tensors(std::move(*batch));   // t.images: [N, 3, H, W] float, zero-copy
//     auto loss = torch::nll_loss(model->forward(t.images), t.labels);
//     ...
//   }   // the batch goes back to the pipeline when the last tensor over it dies
//
// Contract.
// - Zero copy: images is torch::from_blob over DeviceBatch::data() (the device
//   slot on CUDA; the normalized slot or, handed over, the host batch buffer on
//   the host backend) and labels over DeviceBatch::labels(), which crossed the
//   bus in the same copy as the pixels: data_ptr() is that memory.
// - Ownership: both tensors (and every view, slice or autograd copy of them)
//   share the batch; it is released -- its device slot and host buffer go back
//   to the pipeline -- by the deleter of the last of them to die, on whichever
//   thread that is. Until then the pipeline cannot reuse the memory, so a
//   consumer that keeps tensors alive across steps holds slots (next() throws
//   std::logic_error rather than hang when it holds them all; a consumer that
//   hands tensors to other threads must not call next() while they hold every
//   slot, since the check cannot know they will be released).
// - Devices: on the CUDA backend images are a CUDA tensor on the batch's device
//   and the pipeline has made TransferConfig::consumer_stream wait for the
//   batch's copy; compute on that stream (torch_consumer_stream() gives the one
//   LibTorch computes on). labels are a CUDA int64 tensor on the same device,
//   ready on the same stream: no labels.to(device), which would be a pageable
//   copy that synchronises every step. On the host backend both are CPU tensors.
// - Layout: normalized batches are [N, C, H, W] of the normalize dtype (float32,
//   float16 or bfloat16). Un-normalized batches are uint8 [N, H, W, C] as the
//   workers wrote them (pass `shape`); permute({0, 3, 1, 2}) is a view in NCHW.
//   Batches the workers normalized (ImageConfig::normalize) reach the device
//   pipeline as bytes: pass `shape` with float32_chw = true for float32
//   [N, C, H, W].
// - A batch whose samples were all skipped (ErrorPolicy::skip) gives tensors
//   of N = 0; skip it (size() == 0) rather than average a loss over nothing.
// Errors: std::invalid_argument for a moved-from (null) DeviceBatch, a uint8
// batch without a shape or with one that does not match its sample size, and
// a CUDA batch with a LibTorch built without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include <torch/types.h>

#include "device/device_pipeline.h"

namespace conveyor {

struct TensorBatch {
  torch::Tensor images;  // see Layout above
  torch::Tensor labels;  // int64 [N], on the images' device
  // With MixUp or CutMix (device/mix_step.h): the mixed targets, float32
  // [N, classes], on the images' device and sharing the batch as they do
  // (loss: -(soft_labels * log_probs).sum(1).mean()); undefined without.
  torch::Tensor soft_labels;
  // With MixUp or CutMix: the weight of each sample's own label in them (the
  // paired sample, labels.roll(1, 0), has 1 - mix_lambda); 1 without.
  double mix_lambda = 1.0;
  std::uint64_t epoch = 0, index = 0;  // the batch's identity (Batch::epoch, Batch::index)
  std::size_t skipped = 0;             // samples of this batch the workers skipped
  bool last_in_epoch = false;

  // The tensors are also used on `stream` (a cudaStream_t of the same GPU: a
  // side stream, a communication stream): the batch's release waits for what
  // that stream has enqueued by then too, as Tensor::record_stream does for
  // PyTorch's caching allocator. Use this one, not images.record_stream(s):
  // these tensors are from_blob views of the pipeline's slots, and PyTorch's
  // record_stream does nothing for memory its caching allocator did not
  // allocate. Call it after enqueueing that work, while a tensor is alive.
  // Does nothing once the batch is released.
  void record_stream(void* stream) const;

  std::weak_ptr<DeviceBatch> owner;  // the batch both tensors share (set by to_tensors)
};

// The layout of one un-normalized sample: height x width x channels bytes, or
// with float32_chw, channels x height x width floats (normalized by the workers).
struct ImageShape {
  std::int64_t height = 0, width = 0, channels = 3;
  bool float32_chw = false;
};

// Wraps the batch; see the contract above.
TensorBatch to_tensors(DeviceBatch batch, ImageShape shape = {});

// The torch::Device a DeviceBatch's data lives on: kCPU on the host backend,
// {kCUDA, ordinal} on CUDA.
torch::Device torch_device(const Device& device);

// The cudaStream_t LibTorch currently computes on for `device`, to pass as
// TransferConfig::consumer_stream: nullptr (the legacy default stream, which
// LibTorch uses unless told otherwise) for the host backend and for CUDA when
// LibTorch's current stream is its default one. Throws std::invalid_argument
// when the caller switched LibTorch to another stream. A fixed stream is right
// only for a step that never changes streams; otherwise use
// torch_current_stream below, asked at every batch.
void* torch_consumer_stream(const Device& device);

// LibTorch's current stream for `device`, asked at each call: give it to
// TransferConfig::current_consumer_stream so each batch is made ready on, and
// released from, the stream the training step is using at that moment (not
// stream 0). Empty for the host backend (a CPU consumer). With a LibTorch
// whose c10::Stream has no native_handle() (before 2.1: Debian 12's 1.13), the
// function returns nullptr while LibTorch is on its default stream and throws
// std::invalid_argument, as torch_consumer_stream does, when it is not.
std::function<void*()> torch_current_stream(const Device& device);

}  // namespace conveyor
