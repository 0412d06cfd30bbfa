// DevicePipeline: the core Pipeline with its transfer stage on a Device: batch
// buffers come from the device's host memory (pinned on CUDA), and the core's
// one delivery thread runs the copy (TransferCore, through
// StageFunctions::transfer and finish), moving each finished batch into a
// device slot on its own stream while the workers fill the next batches and
// the consumer's stream trains on the previous one.
//
// The slot protocol (docs/cuda.md, "One slot's life": the diagram, and the
// numbered points the code cites).
// Device slot i holds D[i] (uint8 samples), O[i] (the normalized tensor, when
// normalizing) and events copied[i], consumed[i] (and staged[i], normalizing):
//   delivery thread: take a free slot -> copy stream waits consumed[i] -> one
//     copy H -> D[i] -> (record staged[i]; the normalize stream waits for it
//     and normalizes D[i] -> O[i]) -> record copied[i]; then start the next
//     batch the same way, and only then: the host sees copied[i] complete ->
//     publish the batch. One batch is in flight behind the one being
//     published, so the copy engine never idles between batches;
//   consumer, next(): its stream waits copied[i] on the device (no host block);
//   consumer, release: (poison) -> record consumed[i] on its stream -> slot
//     free; the host buffer H goes back to the workers.
// Generation numbers per slot check that a slot is published, taken and
// released exactly once per copy.
//
// Thread safety: as Pipeline: next(), epoch(), state(), stop() belong to one
// consumer thread; stats() is thread-safe. A DeviceBatch may be released on any
// thread (a LibTorch deleter runs wherever the last tensor dies), one thread per
// batch; the release is recorded on the consumer stream, so every use of the
// batch must have been enqueued there (or finished, on the CPU) by then.
// Lifetime: a DeviceBatch keeps the device slots alive, so it may outlive the
// DevicePipeline; the memory is freed when the last one is released.
// Errors: a device error on the delivery thread stops the pipeline and the
// consumer's next call throws PipelineError (stage "transfer") with the CUDA
// call, file:line and message; an error while releasing a batch is kept and
// thrown by the next call to next(), and it closes the free slots, so a
// transfer waiting for one stops and a next() already waiting wakes with an
// error instead of waiting forever. Every device call runs on the pipeline's
// device and leaves the calling thread's current device as it was (on CUDA the
// thread's current context, null included: see Device::bind_thread).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device/device.h"
#include "device/dtype.h"
#include "device/kernels/normalize.h"  // NormalizeJob
#include "pipeline/pipeline.h"
#include "pipeline/stats.h"
#include "image/normalize.h"

namespace conveyor {

// A tensor a BatchStep adds to each batch it delivers, beside the samples and
// labels (MixUp's soft labels): in the pipeline's device memory (host memory
// on the host backend), C-contiguous, ready with DeviceBatch::data() on the
// consumer stream, valid while the DeviceBatch is held.
struct BatchTensor {
  std::string name;  // e.g. "soft_labels"
  void* data = nullptr;
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;
};
// What the steps add to a batch: tensors, and numbers on the host (MixUp's
// lambda).
struct BatchExtras {
  std::vector<BatchTensor> tensors;
  std::vector<std::pair<std::string, double>> values;

  // The tensor or value named so; null or none when no step added it.
  const BatchTensor* tensor(std::string_view name) const;
  std::optional<double> value(std::string_view name) const;
};


// BatchStep: work a layer above adds to the transfer stage for each batch, with
// threads of its own if it needs them (the GPU decode path, gpu_decode/step.h,
// which renders samples the workers left undecoded into the slot). The stage
// runs TransferConfig::batch_steps in their order at fixed points of the slot
// protocol, so the consumer's protocol is unchanged by them:
//   a worker completes batch b -> filled(b), each step
//   delivery thread, transfer of b into slot i: take slot i -> prepare(b, i),
//     each step in order -> place the labels, copy H -> D[i] on the copy
//     stream -> complete(i, D[i], copy), each step in order -> (normalize
//     D[i] -> O[i]) -> complete_output(b, i, O[i] or D[i], labels, that
//     stream), each step in order -> record copied[i]: what the steps enqueue
//     is in the slot, in their order, before the slot counts as copied
//   consumer, next() taking b from slot i: extras(i, b, ...), each step in
//     order: what they add to the DeviceBatch (DeviceBatch::extras)
//   delivery thread, once the host saw copied[i] complete, or the transfer of
//     b failed (in any step's prepare() or after): release(i), each step
// Thread safety: filled() is called by any worker thread; prepare(), complete(),
// complete_output() and release() by the delivery thread; extras() by the
// consumer's thread (after the slot's complete_output, before its release);
// stop() by any thread; stage() from any thread. Lifetime: made after the
// slots and streams, in order; destroyed in reverse order once the transfer's
// streams and the consumer's last release are done, before the slots; they
// may outlive their DevicePipeline while the consumer holds batches.
class BatchStep {
 public:
  virtual ~BatchStep() = default;
  // A worker completed batch b (StageFunctions::filled). Never throws: an
  // error sticks to the batch and prepare() throws it.
  virtual void filled(const Batch& b) noexcept = 0;
  // Before b's labels are placed and its copy is enqueued, into slot `slot`:
  // may write samples into b.data and remove samples from b (listing them in
  // b.skipped). Time it waits for its own threads goes to
  // b.transfer_starved_ns. Throws to fail the batch (the pipeline stops),
  // keeping nothing for release(). The steps after it do not run for b.
  virtual void prepare(Batch& b, std::size_t slot) = 0;
  // After the batch's copy into slot `slot` (`samples`: its first sample, in
  // device memory, or the host buffer when the device hands over) is enqueued
  // on `copy`: enqueues there what completes the slot.
  virtual void complete(std::size_t slot, std::byte* samples, Stream& copy) = 0;
  // After complete() and normalize, on the stream that made the samples the
  // consumer gets (`out`: the normalized tensor, out_type [b.size(), C, H, W],
  // on the normalize stream; without normalize the uint8 samples, D[i], on the
  // copy stream): enqueues there what works on them, before copied. `labels`:
  // the batch's labels on the device, int64 [b.size()], ready on that stream.
  // `b` is the batch as it is delivered. For ops that follow normalize
  // (RandomErasing, device/erase_step.h; MixUp and CutMix, device/mix_step.h).
  // Default: nothing.
  virtual void complete_output(const Batch& b, std::size_t slot, void* out, const std::int64_t* labels,
                               Stream& stream) {
    (void)b;
    (void)slot;
    (void)out;
    (void)labels;
    (void)stream;
  }
  // What the step adds to batch b, from slot `slot`, as the consumer takes it
  // (DeviceBatch::extras): tensors its complete_output() wrote into its own
  // per-slot memory, values it drew. Default: nothing.
  virtual void extras(std::size_t slot, const Batch& b, BatchExtras& out) const {
    (void)slot;
    (void)b;
    (void)out;
  }
  // The slot's work is done on the device, or will never run: what prepare()
  // kept for it may be reused. Idempotent, and a no-op for a slot it holds
  // nothing for (its prepare() did not run or threw).
  virtual void release(std::size_t slot) noexcept = 0;
  // Wakes its threads and a prepare() waiting, for good; idempotent.
  virtual void stop() noexcept = 0;
  // The DevicePipeline is going and its workers are joined: no filled()
  // follows (later calls release what batches still held).
  virtual void pipeline_ended() noexcept {}
  // True when prepare() for the next batch may wait for release() of the
  // batch in flight (the delivery thread must then finish that one first,
  // whichever step says so).
  virtual bool next_waits_for_release() const = 0;
  // Its threads as a stage for DevicePipeline::stats(), after the workers in
  // the steps' order; none by default.
  virtual std::optional<StageStats> stage(double wall_s, Clock::time_point now) const {
    (void)wall_s;
    (void)now;
    return std::nullopt;
  }
};

// Makes one BatchStep for a DevicePipeline being built (BatchStepSetup: below).
struct BatchStepSetup;
using BatchStepMaker = std::function<std::unique_ptr<BatchStep>(const BatchStepSetup&)>;

struct TransferConfig {
  // Normalize on the device: each sample is uint8 HWC of height x width x
  // channels (sample_bytes must equal their product) and becomes out_type NCHW
  // with the per-channel mean and std, so only uint8 crosses the bus.
  //
  // Multi-view samples (image/image_source.h's ImageConfig::views): each
  // sample holds `views` one after another, uint8 HWC each, and each view
  // becomes a tensor of its own, out_type [N, channels, view height, view
  // width] for a batch of N, view after view in the output (view v's at
  // view_offset(v, N)). height and width are unused then.
  struct Normalization {
    std::size_t height = 0, width = 0;
    std::size_t channels = 3;  // 1 .. 3; channel c uses mean[c], std[c]
    Normalize mean_std;        // Default: ImageNet mean and std
    DType out_type = DType::float32;  // float32, float16 or bfloat16
    struct View {
      std::size_t height = 0, width = 0;
    };
    // Default: empty, one view of height x width.
    std::vector<View> views;

    // Views: views.size(), at least 1.
    std::size_t view_count() const { return views.empty() ? 1 : views.size(); }
    // View v's height and width (v < view_count()).
    View view(std::size_t v) const { return views.empty() ? View{height, width} : views.at(v); }
    // Bytes of a uint8 sample before view v (v <= view_count()).
    std::size_t input_offset(std::size_t v) const;
    // Bytes of one uint8 sample, every view's.
    std::size_t input_bytes() const { return input_offset(view_count()); }
    // Bytes of one normalized sample, every view's: channels x height x width of out_type each.
    std::size_t output_bytes() const;
    // Where view v's tensor starts in the output of a batch of `samples`, in bytes.
    std::size_t view_offset(std::size_t v, std::size_t samples) const;
    // The job that normalizes view v of `samples` samples from src to dst (the
    // whole output: the job writes at view_offset); with `indices` (device
    // memory), output sample n reads input sample indices[n].
    NormalizeJob job(const std::uint8_t* src, void* dst, std::size_t samples, const std::uint64_t* indices = nullptr,
                     std::size_t v = 0) const;
  };
  // Default: none; the consumer gets the uint8 samples as the filler wrote them.
  std::optional<Normalization> normalize;

  // The training step's stream: a cudaStream_t on CUDA; on the host backend a
  // Stream::native() from the same device, or nullptr for a consumer that runs
  // on the CPU, in its own thread. On CUDA, nullptr means the legacy default
  // stream, which the caller then computes on: the pipeline puts only its event
  // waits and records there (pass your own non-blocking stream to keep stream 0
  // empty). Default: nullptr.
  void* consumer_stream = nullptr;

  // Optional: asked at each next() for the stream the consumer computes on at
  // that moment (LibTorch's current stream: libtorch/tensors.h's
  // torch_current_stream); the batch is made ready on it and its release is
  // recorded on it, so a caller that switches streams between steps stays
  // correct. Overrides consumer_stream. Default: none.
  std::function<void*()> current_consumer_stream;

  // Optional: polled on the constructing thread while the pipeline allocates
  // and first touches its pools (device slots and host buffers: between
  // buffers, and every kTouchChunk bytes of a buffer's first touch); true
  // abandons the construction, which frees what it took and throws
  // Interrupted (pipeline/batch.h). For a caller that must answer Ctrl-C
  // during a start-up of hundreds of MB. Default: none.
  Interrupt interrupted;

  // Makes the pipeline's BatchSteps (above) at start-up, once per
  // DevicePipeline, after its slots and streams, in this order, which is the
  // order they run in; what one throws, the constructor throws. The GPU
  // decode path is one (gpu_decode/step.h's GpuDecode). Default: none.
  std::vector<BatchStepMaker> batch_steps;
  // Optional: told of each sample's fill, each batch's transfer and finish,
  // each whole copy (on_transferred) and each next() (pipeline/observer.h).
  // NVTX ranges, where built in, are an observer of their own beside it.
  // Default: none.
  std::shared_ptr<Observer> observer;
};

// What a BatchStep is made with: the pipeline's device and the shape of its
// batches and slots.
struct BatchStepSetup {
  std::shared_ptr<Device> device;
  std::size_t sample_bytes = 0;  // Config::sample_bytes
  std::size_t batch_size = 0;    // Config::batch_size
  std::size_t slots = 0;         // device slots, numbered 0 .. slots-1
  std::uint64_t seed = 0;        // Config::seed: for a step's own draws per (seed, epoch, index)
  // TransferConfig::normalize: the layout of the tensor complete_output() is
  // given; none when the consumer gets the uint8 samples.
  std::optional<TransferConfig::Normalization> normalize;
};

// Throws ConfigError naming the field unless n describes sample_bytes-byte
// uint8 samples (height x width x channels, channels 1..3) and a float out_type
// with every std > 0.
void validate_normalization(const TransferConfig::Normalization& n, std::size_t sample_bytes);

struct DeviceSlot;
struct TransferCore;

// One transferred batch, owned by the consumer. Move-only; releasing it (reset()
// or destruction) lets its slot and host buffer be reused.
class DeviceBatch {
 public:
  DeviceBatch() = default;
  DeviceBatch(DeviceBatch&& other) noexcept = default;
  DeviceBatch& operator=(DeviceBatch&& other) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
  ~DeviceBatch() { reset(); }

  explicit operator bool() const { return static_cast<bool>(host_); }
  // Identity, dataset indices, labels and skipped samples; host().data is the
  // host copy (do not write it). With TransferConfig::batch_steps, samples
  // they render on the device (the GPU decode path's) exist only in data(): their
  // host slots were never written.
  const Batch& host() const { return *host_; }
  std::size_t size() const { return host_->size(); }

  // Device memory (host memory on the host backend), ready on the consumer
  // stream: uint8 [size, sample_bytes] as filled, or out_type [size, C, H, W];
  // with Normalization::views, each view's tensor in turn (view_data()).
  void* data() const { return data_; }
  // Normalized views (TransferConfig::Normalization::views): view v's tensor,
  // out_type [size, C, H, W] of that view (view_shape(v)), inside data().
  // Throws std::out_of_range for a v past the views (one view without them).
  void* view_data(std::size_t v) const;
  std::vector<std::int64_t> view_shape(std::size_t v) const;
  // The labels, int64 [size()], in the same memory as data() and ready with it
  // on the consumer stream: they crossed the bus in the batch's one copy (host
  // memory on the host backend). host().labels holds the same values on the host.
  const std::int64_t* labels() const { return labels_; }
  // What the TransferConfig::batch_steps added (BatchStep::extras): the Mix
  // step's soft labels and lambda (device/mix_step.h). Empty without.
  const BatchExtras& extras() const { return extras_; }
  DType dtype() const { return dtype_; }
  // [size, sample_bytes] uint8, or [size, C, H, W] normalized; with normalized
  // views, [size, elements per sample] (each view's tensor: view_shape()).
  std::vector<std::int64_t> shape() const;
  std::size_t bytes() const;
  // The device the data lives on (its backend and ordinal).
  const Device& device() const;

  // The batch is also used on `stream` (a side stream, a communication
  // stream: same device, native handle), as PyTorch's Tensor::record_stream:
  // its release then waits for the work enqueued on that stream so far as
  // well, so the slot is not refilled under it. Call it after enqueueing that
  // work and before the release; not concurrently with reset(). The first call
  // for a slot makes one event, reused afterwards. Throws std::logic_error on
  // an empty batch.
  void record_stream(void* stream);

  // The batch is read on `stream` (same device, native handle), which need not
  // be the consumer stream next() made it ready on: `stream` waits for the
  // batch's copy (on the device; the host does not block), and the release then
  // waits for that stream's work as with record_stream. For hand-offs that name
  // their stream late, as DLPack's __dlpack__(stream=...) does. Throws
  // std::logic_error on an empty batch, DeviceError from the device.
  void use_on(void* stream);

  // Records consumed on the consumer stream (after the streams given to
  // record_stream) and gives the slot and host buffer back. Never throws (an
  // error is kept for the pipeline's next call). Idempotent.
  void reset() noexcept;

 private:
  friend class DevicePipeline;
  std::shared_ptr<TransferCore> core_;
  BatchHandle host_;
  DeviceSlot* slot_ = nullptr;
  std::uint64_t generation_ = 0;
  void* data_ = nullptr;
  const std::int64_t* labels_ = nullptr;
  BatchExtras extras_;
  DType dtype_ = DType::uint8;
  std::unique_ptr<Stream> stream_;                    // TransferConfig::current_consumer_stream's, if any
  std::vector<std::unique_ptr<Stream>> also_used_on_;  // record_stream's
};

// Bytes of device memory a DevicePipeline with these settings allocates for
// its slots (on the host backend, host memory standing in for it): raw uint8
// batches with their labels unless the device hands buffers over, plus
// normalized ones.
// Saturates at SIZE_MAX. Throws nothing.
std::size_t device_pool_bytes(const Config& config, const TransferConfig& transfer, const Device& device);
// Bytes a DevicePipeline's host buffer and raw device slot hold beyond
// batch_size * sample_bytes: the labels that travel with the pixels
// (8 bytes a slot, and up to 7 of alignment).
std::size_t label_tail_bytes(std::size_t batch_size);

class DevicePipeline {
 public:
  // Allocates every buffer, stream and event now (protocol point 1). Throws
  // ConfigError for a bad config or normalize layout, DeviceError for device
  // failures, and what Pipeline's constructor throws.
  DevicePipeline(const Config& config, std::size_t dataset_size, Filler fill, TransferConfig transfer,
                 std::shared_ptr<Device> device, std::optional<PipelineState> resume = std::nullopt);
  ~DevicePipeline();
  DevicePipeline(const DevicePipeline&) = delete;
  DevicePipeline& operator=(const DevicePipeline&) = delete;

  // Blocks until the next batch is on its way to the device and makes the
  // consumer stream wait for it (without blocking the host). Empty when the run
  // is over or stopped. Throws PipelineError after any failure, and
  // std::logic_error when the consumer already holds max_held() batches (the
  // call could never return). The check counts the slots held at the call: a
  // consumer that hands batches to other threads to release must not call
  // next() while they hold every slot.
  std::optional<DeviceBatch> next();

  using EpochRange = EpochRangeOf<DevicePipeline, DeviceBatch>;
  // The remaining batches of epoch e, as Pipeline::epoch.
  EpochRange epoch(std::uint64_t e);

  // As Pipeline::wait_ready: true once next() would not wait for the workers,
  // including when it would throw (the consumer holds every device slot).
  bool wait_ready(std::chrono::microseconds timeout);

  // As Pipeline::consumer_away.
  void consumer_away() { pipeline_->consumer_away(); }
  PipelineState state() const { return pipeline_->state(); }
  // As Pipeline::stats, with the batch steps' stages after the workers, for
  // those that have one (the GPU decode feed's threads: "gpu decode").
  PipelineStats stats() const;
  Clock::time_point started_at() const { return pipeline_->started_at(); }
  std::vector<SkippedSample> skipped() const { return pipeline_->skipped(); }
  // The steps TransferConfig::batch_steps made, in order; empty without any.
  // For their own layer's accessors (gpu_decode/step.h, gpu_decode_counts).
  std::vector<const BatchStep*> batch_steps() const;
  std::size_t batches_per_epoch() const { return pipeline_->batches_per_epoch(); }
  // Stops and joins every thread. Idempotent.
  void stop();

  Device& device() const;
  std::size_t device_slots() const;
  // Device slots the consumer holds now (DeviceBatches alive): next() throws
  // when this reaches max_held().
  std::size_t held_slots() const;
  // The most batches the consumer can hold with the pipeline still able to
  // give another: device_slots(), or the host pool's buffers if fewer (a
  // Config::host_buffers below the slots): a batch held keeps its host buffer
  // until released (its indices and labels; handed over, its bytes too), and
  // with all of them held the workers have none to fill.
  // Under Config::tune_device_queue: the slots set up so far, which grow
  // with the depth.
  std::size_t max_held() const { return max_held_.load(); }

 private:
  // Throws the error of a batch's release that failed (a consumer-side error), if one did.
  void throw_if_consumer_failed() const;
  std::shared_ptr<TransferCore> core_;
  std::unique_ptr<Pipeline> pipeline_;  // after core_: destroyed (joined) first
  std::atomic<bool> stopped_{false};    // stop() was called
  std::atomic<std::size_t> max_held_{0};  // grows with a tuned device queue (its tuning thread)
};

}  // namespace conveyor
