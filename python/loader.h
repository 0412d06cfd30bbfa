// Loader: what Python's conveyor.Loader drives, written in C++ without Python:
// a dataset (image files, or rows of an in-memory array), the DevicePipeline
// that feeds it to a device, and the consumer's place in the stream across
// epochs. python/module.cpp only converts arguments and results, releases the
// GIL and wraps batches for DLPack and the buffer protocol.
//
// Contract.
// - Epochs: the stream is the pipeline's: epoch 0, 1, ... (Config::epochs of
//   them, or endless). The consumer's place is state(): the epoch of the next
//   batch and the batches of it already taken. seek() moves it anywhere (an
//   epoch's start, or a state saved mid-epoch); the pipeline restarts there and
//   produces exactly the batches that follow, bit-identical to an
//   uninterrupted run, whatever the worker count.
// - Start: the pipeline starts at the first wait_ready(), next() or seek(),
//   not at construction: a state loaded before iterating starts it once, there.
//   stats() are the running pipeline's (a seek starts them afresh); skipped()
//   lists the skips of every pipeline this loader ran.
// - Device: opened at construction. The host backend hands the workers'
//   buffers over (HostTransfer::handover): a CPU consumer reads them in place.
//   On CUDA each batch is made ready on the stream next() is given.
// - Arrays: the loader reads the rows in place; the caller keeps them alive and
//   unchanged until close() or destruction (the labels are copied).
//
// Thread safety: one thread at a time for every call (module.cpp holds a
// mutex); batches may be released on any thread.
// Errors: the constructor throws ConfigError, DatasetError, AugmentError,
// std::invalid_argument or DeviceError naming the field, file or device;
// next() throws PipelineError naming the stage, epoch, sample and file.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/dtype.h"
#include "gpu_decode/share.h"
#include "pipeline/config.h"
#include "pipeline/skip_log.h"
#include "pipeline/state.h"
#include "pipeline/stats.h"
#include "data/array_source.h"
#include "data/dataset.h"
#include "image/image_source.h"

namespace conveyor::python {

// An element type as DLPack and NumPy see it: kind 'u' (unsigned), 'i'
// (signed), 'f' (IEEE float), 'b' (bfloat) or '?' (bool: one byte, 0 or 1),
// and its bits.
struct Element {
  char kind = 'u';
  std::uint8_t bits = 8;
  bool operator==(const Element&) const = default;
};
Element element_of(DType t);

// Rows of an in-memory array: the bytes of every row in C order, one row's
// shape and element type, and one label per row.
struct ArrayRows {
  std::span<const std::byte> data;
  std::vector<std::int64_t> row_shape;  // empty for a 1-d array (scalar rows)
  Element element;
  std::vector<std::int64_t> labels;
};

// What is common to both kinds of dataset.
struct LoaderSettings {
  Config config;                   // sample_bytes is set by the loader
  DeviceConfig device;             // the loader sets handover_if_host: a CPU consumer reads in place
  std::optional<DType> normalize;  // on the device, for uint8 HWC samples of 1..3 channels
  // Images only: the share of JPEGs the device's decoder takes:
  // 0 off, a share in (0, 1], nullopt auto (gpu_decode/share.h). Default: off.
  std::optional<double> gpu_decode = 0.0;
  // The most the batch pools (host and device) may take, in MiB; checked
  // before anything is allocated. Default: 0, default_pool_budget_bytes() (a
  // quarter of physical memory), as the command line's --max-memory-mb.
  double max_memory_mb = 0;
  // Polled while a pipeline starts, as TransferConfig::interrupted: true
  // abandons the start with Interrupted (pipeline/batch.h), the loader as it
  // was, to start again at its next call. Default: none.
  Interrupt interrupted;
};

class Loader {
 public:
  // Image files, decoded and augmented by ImageSource (crop size from the
  // transforms; samples are uint8 HWC RGB, or `normalize`'s dtype CHW).
  // Both constructors throw std::invalid_argument when the batch pools would
  // exceed settings.max_memory_mb, naming what sizes them.
  Loader(Dataset dataset, ImageConfig image, LoaderSettings settings);
  // Rows of an array, copied into the batch as they are. With `normalize`,
  // rows must be uint8 [H, W, C] with C in 1..3. Throws std::invalid_argument
  // for a label outside 0..kMaxLabel, naming its row.
  Loader(ArrayRows rows, LoaderSettings settings);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  std::size_t dataset_size() const { return dataset_size_; }
  std::size_t batches_per_epoch() const;
  const Config& config() const { return settings_.config; }
  // One sample as the consumer sees it (the batch adds the first axis).
  const std::vector<std::int64_t>& sample_shape() const { return sample_shape_; }
  // views=: each view's place in a sample (uint8 HWC each); empty for one view.
  // With normalize=, each view is then a dense tensor of the batch (DeviceBatch::view_data).
  const std::vector<ViewLayout>& views() const {
    static const std::vector<ViewLayout> none;
    return images_ ? images_->views() : none;
  }
  Element element() const { return element_; }
  const Device& device() const { return *device_; }
  // Labels are 0 .. num_classes() - 1: the dataset's, or for arrays the largest label + 1.
  std::int64_t num_classes() const { return num_classes_; }
  // Class names of a folder dataset (its sub-folders, label order); empty otherwise.
  const std::vector<std::string>& classes() const { return classes_; }
  // The GPU decode share in use (0: the CPU workers alone) and the line that
  // says why (empty when it was not asked for).
  double gpu_share() const { return gpu_.share; }
  const std::string& gpu_decode_note() const { return gpu_.line; }
  // Whether the transforms end with MixUp or CutMix (batches carry soft labels).
  bool mixes() const { return images_ && images_->augment().mixing(); }
  // What tells this dataset from another of the same size, for a state taken
  // on it (FNV-1a): image files, every name (relative to the folder, or to
  // the list's folder) and label; arrays, the row shape,
  // dtype, labels and 64 rows spread over the array (hashing every byte of a
  // large array would cost seconds at each construction).
  std::uint64_t dataset_digest() const { return dataset_digest_; }

  // Where the consumer stands: initial_state() before anything was taken.
  PipelineState state() const;
  // The next batch is the one after `state` (epoch e's start: delivered
  // empty). Restarts the pipeline there. Throws std::invalid_argument when
  // the state was taken with other settings; the position is then unchanged.
  void seek(const PipelineState& state);

  // As DevicePipeline::wait_ready (starting the pipeline if needed).
  bool wait_ready(std::chrono::microseconds timeout);
  // The next batch, made ready on `stream` (CUDA: a cudaStream_t, nullptr for
  // the legacy default stream; ignored on the host backend). Empty once the
  // configured epochs are done or after close().
  std::optional<DeviceBatch> next(void* stream);

  // Whether the consumer holds every device slot now, so that next() would
  // throw instead of waiting. False before the pipeline starts.
  bool every_slot_held() const {
    return running() && pipeline_->held_slots() >= pipeline_->max_held();
  }
  // The running pipeline's device slots; 0 before it starts.
  std::size_t device_slots() const { return pipeline_ ? pipeline_->device_slots() : 0; }

  PipelineStats stats() const;
  // Every skip since construction, across seeks: each distinct (sample,
  // reason) once with its count and epochs (pipeline/skip_log.h).
  std::vector<SkippedSample> skipped() const;
  // Stops and joins every thread; batches still held stay valid. Idempotent.
  void close();
  bool closed() const { return closed_; }
  // Whether the pipeline's threads are running: it starts at the first
  // wait_ready() or next(), and again after seek(); close() joins them.
  bool running() const { return pipeline_ != nullptr && !closed_; }

 private:
  Loader(LoaderSettings settings, std::size_t dataset_size, std::size_t sample_bytes);
  void start(std::optional<PipelineState> from);
  // The end of both constructors: device/memory_budget.h's estimate (with the
  // labels this loader keeps for arrays=) against max_memory_mb.
  void check_memory() const;

  LoaderSettings settings_;
  std::size_t dataset_size_ = 0;
  std::uint64_t dataset_digest_ = 0;
  std::vector<std::int64_t> sample_shape_;
  Element element_;
  std::int64_t num_classes_ = 0;
  std::vector<std::string> classes_;
  std::shared_ptr<Device> device_;
  TransferConfig transfer_;
  void* stream_ = nullptr;  // the stream the batch being taken is made ready on
  // The filler's owner: one of the two, declared before the pipeline that calls it.
  std::unique_ptr<ImageSource> images_;
  GpuDecodeChoice gpu_;
  std::vector<std::int64_t> labels_;
  std::unique_ptr<ArraySource> rows_;
  std::optional<PipelineState> pending_;  // where start() begins: seek()'s state
  std::unique_ptr<DevicePipeline> pipeline_;
  SkipLog skipped_before_;  // from pipelines a seek() replaced
  bool closed_ = false;
};

}  // namespace conveyor::python
