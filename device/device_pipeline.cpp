// The transfer stage's ordering logic, written once for both backends. Every
// step below names the protocol point it holds, as numbered in docs/cuda.md
// ("One slot's life").
#include "device/device_pipeline.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "device/kernels/normalize.h"
#include "device/nvtx.h"

namespace conveyor {

namespace {

// Labels travel with the pixels: the delivery thread writes a
// batch's n labels into its host buffer at label_offset(n), right after the
// pixels and 8-byte aligned, and one copy moves both, so the labels arrive on
// the device with the images and the consumer needs no pageable copy (which
// synchronises) to move them. Each host buffer and raw slot holds this tail
// beyond the pixels.
std::size_t label_offset(std::size_t n, std::size_t sample_bytes) {
  return (n * sample_bytes + alignof(std::int64_t) - 1) / alignof(std::int64_t) * alignof(std::int64_t);
}

// Runs wait(), a transfer phase's wait for memory the consumer still holds (a
// free slot, or the device's last use of one), and adds its time to
// batch.transfer_blocked_ns: the consumer's time, which the core counts as the
// delivery stage's blocked time, not busy (StageCounters::count_phase). Returns
// what wait() returned; a wait() that throws counts nothing.
template <class Wait>
auto wait_for_consumer(Batch& batch, Wait&& wait) {
  const auto t0 = Clock::now();
  if constexpr (std::is_void_v<std::invoke_result_t<Wait&>>) {
    wait();
    batch.transfer_blocked_ns += elapsed_ns(t0, Clock::now());
  } else {
    auto got = wait();
    batch.transfer_blocked_ns += elapsed_ns(t0, Clock::now());
    return got;
  }
}
}  // namespace

const BatchTensor* BatchExtras::tensor(std::string_view name) const {
  for (const BatchTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<double> BatchExtras::value(std::string_view name) const {
  for (const auto& [n, v] : values) {
    if (n == name) return v;
  }
  return std::nullopt;
}

std::size_t label_tail_bytes(std::size_t batch_size) {
  return saturating_add(alignof(std::int64_t) - 1, saturating_mul(batch_size, sizeof(std::int64_t)));
}

constexpr unsigned char kPoison = 0xA5;

struct DeviceSlot {
  std::size_t id = 0;
  std::unique_ptr<Buffer> raw;  // D[i]: the uint8 batch (none when the host backend hands over)
  std::unique_ptr<Buffer> out;  // O[i]: the normalized batch (none without normalize)
  std::unique_ptr<Event> copied, consumed;
  std::unique_ptr<Event> staged;  // normalizing: D[i] holds the batch (the normalize stream waits for it)
  std::chrono::steady_clock::time_point started;  // when the delivery thread started this slot's copy
  // Touched by the delivery thread while the slot is free, and by the consumer
  // while it holds the batch; the free-slot queue orders the two.
  std::uint64_t copied_generation = 0;    // copies recorded into this slot
  std::uint64_t consumed_generation = 0;  // releases recorded for those copies
  std::byte* source = nullptr;            // what the consumer reads: D[i] or, handed over, H
  // One event per stream the consumer named with DeviceBatch::record_stream,
  // made on first use and reused by later generations (an event's wait binds
  // to the record before it, so re-recording is safe).
  std::vector<std::unique_ptr<Event>> side_done;
};

struct TransferCore {
  std::shared_ptr<Device> device;
  TransferConfig config;
  std::size_t sample_bytes = 0, batch_capacity = 0;
  // Room for the most slots the run may have; the first slot_count are set
  // up (add_slots). Never moved, so a DeviceSlot* stays valid while more are
  // added; a slot's setup reaches the delivery thread through free_slots.
  std::unique_ptr<DeviceSlot[]> slots;
  std::size_t max_slots = 0;
  std::atomic<std::size_t> slot_count{0};
  BoundedQueue<std::size_t> free_slots;
  // Streams after the slots: destroyed first, so their queued work (which
  // names the slots' events and buffers) finishes before those die.
  std::unique_ptr<Stream> copy_stream;
  std::unique_ptr<Stream> normalize_stream;  // normalizing: its own, so the copy engine never waits for a kernel
  std::unique_ptr<Stream> consumer_stream;
  bool thread_bound = false;  // the delivery thread (ours alone) is bound to the device once
  std::shared_ptr<Observer> observer;  // config.observer and NVTX's, combined
  std::chrono::steady_clock::time_point last_finished;  // the delivery thread's: on_transferred's previous end
  // Slots the consumer holds: next() counts up on the consumer's thread; a
  // release may count down on another (a tensor deleter, see DeviceBatch).
  std::atomic<std::size_t> held{0};

  std::mutex error_mu;
  // The first error on the consumer's side (a release, or next()'s own device
  // calls), with what failed: thrown by every later next().
  std::string consumer_error;
  std::exception_ptr consumer_cause;  // what was thrown, for PipelineError::cause()
  std::vector<BatchHandle> quarantined;  // host buffers whose release failed, kept until the end

  void quarantine(BatchHandle h) noexcept {
    try {
      std::lock_guard lk(error_mu);
      quarantined.push_back(std::move(h));
    } catch (...) {
      // Could not keep it: h's destructor returns it to the pool, the lesser harm.
    }
  }

  // TransferConfig::batch_steps', in order (the GPU decode path's feed
  // threads and CPU fall-back).
  std::vector<std::unique_ptr<BatchStep>> steps;

  // Every step's release(id): each is idempotent, and a no-op for a slot it
  // holds nothing for, so a batch failed in any step's prepare() releases all.
  void release_steps(std::size_t id) noexcept {
    for (auto& step : steps) step->release(id);
  }

  explicit TransferCore(std::size_t most)
      : slots(std::make_unique<DeviceSlot[]>(most)), max_slots(most), free_slots(most) {}
  ~TransferCore() {
    // Work on the consumer's stream (which we do not own) may still name our
    // events: wait for the last release of each slot before anything is freed.
    if (!device) return;
    try {
      for (std::size_t i = 0; i < slot_count.load(); ++i) {
        if (slots[i].consumed) device->synchronize(*slots[i].consumed);
      }
      if (copy_stream) device->synchronize(*copy_stream);
      if (normalize_stream) device->synchronize(*normalize_stream);
    } catch (...) {
      // A device in error: there is nothing left to wait for.
    }
    // Each joins its threads and waits for its work, before the slots and
    // streams go; the last made goes first.
    while (!steps.empty()) steps.pop_back();
  }

  // Keeps the first consumer-side error and closes the free slots, so the
  // delivery thread stops rather than waiting for a slot that may never return.
  void fail(const char* doing, const char* what, std::exception_ptr cause = nullptr) noexcept {
    try {
      std::lock_guard lk(error_mu);
      if (consumer_error.empty()) {
        consumer_error = std::string(doing) + ": " + what;
        consumer_cause = std::move(cause);
      }
    } catch (...) {
      // Out of memory while keeping an error: the free slots close regardless.
    }
    free_slots.close();
  }

  // Sets up slots slot_count .. to-1 (their device buffers and events) and
  // frees them for the delivery thread: all of them at the start (protocol
  // point 1), and more from the tuning thread as a tuned device queue
  // deepens (every device call binds the device itself). Throws
  // PoolAllocationError when a slot's memory is not to be had (the slots set
  // up so far stay), DeviceError from the device, Interrupted when
  // config.interrupted says so.
  void add_slots(std::size_t to) {
    if (to > max_slots) throw std::logic_error("device pipeline: more slots than the most it was made for");
    const std::size_t raw_bytes = batch_capacity * sample_bytes + label_tail_bytes(batch_capacity);
    const std::size_t out_bytes = config.normalize ? batch_capacity * config.normalize->output_bytes() : 0;
    for (std::size_t i = slot_count.load(); i < to; ++i) {
      DeviceSlot& s = slots[i];
      s.id = i;
      try {
        if (!device->hands_over()) s.raw = device->allocate_interruptibly(raw_bytes, config.interrupted);
        if (out_bytes) s.out = device->allocate_interruptibly(out_bytes, config.interrupted);
      } catch (const std::bad_alloc&) {  // the host backend's device memory; CUDA's throws DeviceError naming cudaMalloc
        throw PoolAllocationError("device pool: out of memory allocating slot " + std::to_string(i + 1) + " of " +
                                  std::to_string(to) + " (" +
                                  std::to_string((device->hands_over() ? 0 : raw_bytes) + out_bytes) + " bytes each)");
      }
      s.copied = device->create_event(EventKind::sync);
      s.consumed = device->create_event(EventKind::sync);
      if (config.normalize) s.staged = device->create_event(EventKind::sync);
      slot_count.store(i + 1);
      (void)free_slots.try_push(i);  // capacity = max_slots: never full; publishes the slot's setup
    }
  }

  // The delivery thread's first phase for one finished batch (protocol point
  // 4): enqueue its copy (and normalize) and return. The core calls finish()
  // for it after it has started the next batch, so the copy engine always has
  // the next copy queued (StageFunctions::finish).
  void transfer(Batch& batch) {
    const Observed observed(observer.get(), {Work::transfer, 0, batch.epoch, batch.index});
    const auto start = std::chrono::steady_clock::now();
    if (!thread_bound) {
      device->bind_thread();  // 3: first, on this thread (the calls guard themselves too)
      thread_bound = true;
    }
    // Blocks while the consumer holds every slot; empty once stopped.
    auto id = wait_for_consumer(batch, [&] { return free_slots.pop(); });
    if (!id) {
      // Closed by stop() (the core ignores errors while stopping) or by a failed release.
      std::lock_guard lk(error_mu);
      throw std::runtime_error(consumer_error.empty() ? "stopped while waiting for a free device slot"
                                                      : "the consumer failed: " + consumer_error);
    }
    DeviceSlot& s = slots[*id];
    if (s.consumed_generation != s.copied_generation) {  // 4: generations
      throw std::logic_error("device slot " + std::to_string(s.id) + " reused before its release was recorded");
    }
    Stream& copy = *copy_stream;
    try {
      for (auto& step : steps) step->prepare(batch, s.id);  // before the labels are placed: a skip shortens the batch
      device->wait(copy, *s.consumed);  // 4: D[i]/O[i] are free on the device's timeline
      const std::size_t at = label_offset(batch.size(), sample_bytes);
      std::memcpy(batch.data + at, batch.labels.data(), batch.size() * sizeof(std::int64_t));
      const std::size_t bytes = at + batch.size() * sizeof(std::int64_t);  // 12: pixels, then labels
      if (device->hands_over()) {
        s.source = batch.data;  // host backend, CPU consumer: the host buffer itself
      } else {
        s.source = static_cast<std::byte*>(s.raw->data());
        device->copy_to_device(s.source, batch.data, bytes, copy);  // 11: one contiguous copy per batch
      }
      for (auto& step : steps) step->complete(s.id, s.source, copy);  // 13: into the slot after the copy, before copied
      const auto* labels_on_device = reinterpret_cast<const std::int64_t*>(s.source + at);
      if (config.normalize) {  // 10: on its own stream, chained by events; uint8 crossed the bus
        device->record(*s.staged, copy);
        device->wait(*normalize_stream, *s.staged);
        for (std::size_t v = 0; v < config.normalize->view_count(); ++v) {
          kernels::normalize(*device,
                             config.normalize->job(reinterpret_cast<const std::uint8_t*>(s.source), s.out->data(),
                                                   batch.size(), nullptr, v),
                             *normalize_stream);
        }
        for (auto& step : steps) step->complete_output(batch, s.id, s.out->data(), labels_on_device, *normalize_stream);
        device->record(*s.copied, *normalize_stream);  // 4: recorded before the slot is published
      } else {
        for (auto& step : steps) step->complete_output(batch, s.id, s.source, labels_on_device, copy);
        device->record(*s.copied, copy);  // 4: recorded before the slot is published
      }
      ++s.copied_generation;
    } catch (...) {
      // The core recycles H (poisoning it, if asked) or frees it as soon as this
      // throws, while the copy enqueued above may still be reading it: wait for
      // the streams first, whatever they report.
      drain_streams();
      release_steps(s.id);  // their work, if enqueued, is done
      throw;
    }
    s.started = start;
    batch.user = &s;  // finish() publishes it
  }

  // The second phase (protocol point 5), on the delivery thread once the next
  // batch's copy is queued: the host sees this batch's copy (and normalize)
  // done before it is published, so H goes back to the workers (when the
  // consumer releases the batch, later still) only after the DMA read it.
  void finish(Batch& batch) {
    const Observed observed(observer.get(), {Work::finish, 0, batch.epoch, batch.index});
    DeviceSlot& s = *static_cast<DeviceSlot*>(batch.user);
    try {
      // The copy waited on the device for the consumer's last use of this slot
      // (its step may still run on the GPU after its thread released the batch):
      // that wait is the consumer's time, which the stage reports as blocked.
      wait_for_consumer(batch, [&] { device->synchronize(*s.consumed); });
      device->synchronize(*s.copied);
    } catch (...) {
      drain_streams();  // as in transfer(): H must outlive the DMA that reads it
      release_steps(s.id);
      throw;
    }
    release_steps(s.id);  // 13: their work is complete (before copied)
    if (observer) {
      const auto end = std::chrono::steady_clock::now();
      observer->on_transferred(batch, std::max(s.started, last_finished), end);  // spans that follow each other
      last_finished = end;
    }
  }

  // True when transfer() would block for a free slot (the batch in flight may
  // hold the last one), or a step's prepare() for the release of the batch
  // in flight (the GPU decode path with one decoder: the next batch's decode
  // needs the decoder the batch in flight renders from).
  bool transfer_would_wait() const {
    const auto waits = [](const auto& step) { return step->next_waits_for_release(); };
    return std::any_of(steps.begin(), steps.end(), waits) || free_slots.size() == 0;
  }

  // Waits for everything enqueued on the transfer's streams; never throws (a
  // device in error has nothing left to run, and the caller is already failing).
  void drain_streams() noexcept {
    for (Stream* stream : {copy_stream.get(), normalize_stream.get()}) {
      if (!stream) continue;
      try {
        device->synchronize(*stream);
      } catch (...) {
      }
    }
  }

  // The consumer's release of one slot (protocol point 7). Returns false when
  // the release could not be recorded: the slot then stays out of the free list
  // (its memory may still be in use on the device) and the error is kept.
  // `stream`: the stream the batch was taken on (nullptr: consumer_stream);
  // `also`: the other streams the consumer said use it (record_stream).
  bool release(DeviceSlot& s, std::uint64_t generation, Stream* stream,
               const std::vector<std::unique_ptr<Stream>>& also) noexcept {
    --held;
    try {
      if (generation != s.copied_generation) {
        throw std::logic_error("device slot " + std::to_string(s.id) + " released for generation " +
                               std::to_string(generation) + " but holds " + std::to_string(s.copied_generation));
      }
      Stream& consumer = stream ? *stream : *consumer_stream;
      // Each other stream's work so far comes before "consumed": chained through an event.
      while (s.side_done.size() < also.size()) s.side_done.push_back(device->create_event(EventKind::sync));
      for (std::size_t i = 0; i < also.size(); ++i) {
        device->record(*s.side_done[i], *also[i]);
        device->wait(consumer, *s.side_done[i]);
      }
      if (device->poisons_released()) {
        if (s.raw) device->set_bytes(s.raw->data(), kPoison, s.raw->bytes(), consumer);
        if (s.out) device->set_bytes(s.out->data(), kPoison, s.out->bytes(), consumer);
      }
      device->record(*s.consumed, consumer);  // 7: on the consumer's stream, after its work on the batch
      // Handed over, the consumer's stream reads H itself: H may go back to the
      // workers only once that work is done (instant for a consumer on the CPU).
      if (device->hands_over()) device->synchronize(*s.consumed);
    } catch (const std::exception& e) {
      fail("releasing a batch", e.what(), std::current_exception());  // the delivery thread must not wait for this slot
      return false;
    } catch (...) {
      fail("releasing a batch", "unknown error", std::current_exception());
      return false;
    }
    s.consumed_generation = generation;
    (void)free_slots.try_push(s.id);  // capacity = slot count: never full; refused only once stopped
    return true;
  }
};

PipelineStats DevicePipeline::stats() const {
  PipelineStats s = pipeline_->stats();
  auto at = std::min<std::size_t>(1, s.stages.size());  // after the workers, in the steps' order
  for (const auto& step : core_->steps) {
    if (auto stage = step->stage(s.wall_s, Clock::now())) {
      s.stages.insert(s.stages.begin() + std::ptrdiff_t(at++), std::move(*stage));
    }
  }
  return s;
}

std::vector<const BatchStep*> DevicePipeline::batch_steps() const {
  std::vector<const BatchStep*> steps;
  for (const auto& step : core_->steps) steps.push_back(step.get());
  return steps;
}

std::size_t TransferConfig::Normalization::input_offset(std::size_t v) const {
  std::size_t bytes = 0;
  for (std::size_t u = 0; u < v; ++u) bytes += view(u).height * view(u).width * channels;
  return bytes;
}

std::size_t TransferConfig::Normalization::output_bytes() const { return input_bytes() * dtype_size(out_type); }

std::size_t TransferConfig::Normalization::view_offset(std::size_t v, std::size_t samples) const {
  return samples * input_offset(v) * dtype_size(out_type);  // one element per input byte, a view's whole batch at a time
}

NormalizeJob TransferConfig::Normalization::job(const std::uint8_t* src, void* dst, std::size_t samples,
                                                const std::uint64_t* indices, std::size_t v) const {
  const View shape = view(v);
  NormalizeJob j;
  j.src = src + input_offset(v);
  j.dst = static_cast<std::byte*>(dst) + view_offset(v, samples);
  j.indices = indices;
  j.samples = samples;
  j.height = shape.height;
  j.width = shape.width;
  j.src_stride = input_bytes();
  j.channels = channels;
  j.out_type = out_type;
  for (std::size_t c = 0; c < channels; ++c) j.affine[c] = channel_affine(mean_std.mean[c], mean_std.std[c]);
  return j;
}

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& other) noexcept {
  if (this != &other) {
    reset();
    core_ = std::move(other.core_);
    host_ = std::move(other.host_);
    slot_ = std::exchange(other.slot_, nullptr);
    generation_ = other.generation_;
    data_ = std::exchange(other.data_, nullptr);
    labels_ = std::exchange(other.labels_, nullptr);
    extras_ = std::exchange(other.extras_, {});
    stream_ = std::move(other.stream_);
    also_used_on_ = std::move(other.also_used_on_);
    dtype_ = other.dtype_;
  }
  return *this;
}

void DeviceBatch::record_stream(void* stream) {
  if (!core_) throw std::logic_error("DeviceBatch::record_stream on an empty batch");
  also_used_on_.push_back(core_->device->wrap_stream(stream));
}

void DeviceBatch::use_on(void* stream) {
  if (!core_) throw std::logic_error("DeviceBatch::use_on on an empty batch");
  auto s = core_->device->wrap_stream(stream);
  core_->device->wait(*s, *slot_->copied);  // as next() does for the consumer stream (protocol point 6)
  also_used_on_.push_back(std::move(s));
}

void DeviceBatch::reset() noexcept {
  if (!core_) return;
  const bool released = core_->release(*slot_, generation_, stream_.get(), also_used_on_);
  also_used_on_.clear();
  stream_.reset();
  if (released) {
    host_.reset();  // H back to the workers (with its poison, if asked) after the slot is recorded free
  } else if (!core_->device->hands_over()) {
    host_.reset();  // its copy finished before the batch was published: H is safe to refill
  } else {
    core_->quarantine(std::move(host_));  // the consumer's stream may still read H: never refill it
  }
  slot_ = nullptr;
  data_ = nullptr;
  labels_ = nullptr;
  extras_.tensors.clear();  // they point into the slot
  extras_.values.clear();
  core_.reset();
}

std::vector<std::int64_t> DeviceBatch::shape() const {
  if (!core_) return {};
  const auto n = static_cast<std::int64_t>(size());
  if (const auto& norm = core_->config.normalize) {
    if (!norm->views.empty()) return {n, std::int64_t(norm->input_bytes())};  // elements: one per input byte
    return {n, std::int64_t(norm->channels), std::int64_t(norm->height), std::int64_t(norm->width)};
  }
  return {n, std::int64_t(host_->sample_bytes)};
}

namespace {
// The batch's normalization, holding view v; std::out_of_range naming `what` without.
const TransferConfig::Normalization& normalized_view(const std::shared_ptr<TransferCore>& core, std::size_t v,
                                                     const char* what) {
  if (!core || !core->config.normalize || v >= core->config.normalize->view_count()) {
    throw std::out_of_range(std::string("DeviceBatch::") + what + ": no normalized view " + std::to_string(v));
  }
  return *core->config.normalize;
}
}  // namespace

void* DeviceBatch::view_data(std::size_t v) const {
  const TransferConfig::Normalization& norm = normalized_view(core_, v, "view_data");
  return static_cast<std::byte*>(data_) + norm.view_offset(v, size());
}

std::vector<std::int64_t> DeviceBatch::view_shape(std::size_t v) const {
  const TransferConfig::Normalization& norm = normalized_view(core_, v, "view_shape");
  const TransferConfig::Normalization::View shape = norm.view(v);
  return {std::int64_t(size()), std::int64_t(norm.channels), std::int64_t(shape.height), std::int64_t(shape.width)};
}

const Device& DeviceBatch::device() const { return *core_->device; }

std::size_t DeviceBatch::bytes() const {
  if (!core_) return 0;
  if (const auto& norm = core_->config.normalize) {
    return size() * norm->output_bytes();
  }
  return size() * host_->sample_bytes;
}

void validate_normalization(const TransferConfig::Normalization& n, std::size_t sample_bytes) {
  if (n.channels < 1 || n.channels > 3) throw ConfigError("normalize.channels", "must be 1, 2 or 3");
  if (n.views.empty() && (n.height == 0 || n.width == 0)) throw ConfigError("normalize.height", "and width must be >= 1");
  // Saturating: a sum of products that wraps could land on sample_bytes.
  std::size_t bytes = 0;
  std::string layout;
  for (std::size_t v = 0; v < n.view_count(); ++v) {
    const TransferConfig::Normalization::View shape = n.view(v);
    if (shape.height == 0 || shape.width == 0) {
      throw ConfigError("normalize.views", "view " + std::to_string(v) + ": height and width must be >= 1");
    }
    bytes = saturating_add(bytes, saturating_mul(saturating_mul(shape.height, shape.width), n.channels));
    layout += (v ? " + " : "") + std::to_string(shape.height) + "x" + std::to_string(shape.width) + "x" +
              std::to_string(n.channels);
  }
  if (bytes != sample_bytes) {
    throw ConfigError("normalize", "layout " + layout + " does not match sample_bytes " + std::to_string(sample_bytes));
  }
  if (n.out_type != DType::float32 && n.out_type != DType::float16 && n.out_type != DType::bfloat16) {
    throw ConfigError("normalize.out_type", "must be float32, float16 or bfloat16");
  }
  if (const auto p = normalize_problem(n.mean_std, n.channels)) throw ConfigError("normalize." + p->field, p->problem);
}

std::size_t device_pool_bytes(const Config& config, const TransferConfig& transfer, const Device& device) {
  const std::size_t raw =
      device.hands_over() ? 0
                          : saturating_add(saturating_mul(config.batch_size, config.sample_bytes),
                                           label_tail_bytes(config.batch_size));
  const std::size_t out = transfer.normalize ? saturating_mul(config.batch_size, transfer.normalize->output_bytes()) : 0;
  return saturating_mul(config.device_buffer_count(), saturating_add(raw, out));
}

namespace {
// Protocol point 1: every device buffer, stream and event of the run, allocated
// now so the steady state allocates none. Throws PoolAllocationError when the
// slots do not fit, DeviceError from the device, Interrupted when
// transfer.interrupted says so.
std::shared_ptr<TransferCore> make_core(const Config& config, const TransferConfig& transfer,
                                        const std::shared_ptr<Device>& device) {
  auto core = std::make_shared<TransferCore>(config.device_buffer_count());  // the most: a tuned queue's ceiling
  core->device = device;
  core->config = transfer;
  core->observer = combine_observers({nvtx_observer(), transfer.observer});
  core->sample_bytes = config.sample_bytes;
  core->batch_capacity = config.batch_size;
  core->add_slots(config.device_buffer_start());
  core->copy_stream = device->create_stream();  // 2: its own non-blocking stream
  if (transfer.normalize) core->normalize_stream = device->create_stream();  // 10: and normalize's
  core->consumer_stream = device->wrap_stream(transfer.consumer_stream);
  const BatchStepSetup setup{device,      config.sample_bytes, config.batch_size, core->max_slots,
                             config.seed, transfer.normalize};
  for (const auto& make : transfer.batch_steps) {
    if (!make) throw std::invalid_argument("device pipeline: transfer.batch_steps holds an empty maker");
    core->steps.push_back(make(setup));
    if (!core->steps.back()) throw std::invalid_argument("device pipeline: a batch step maker returned null");
  }
  return core;
}

// The core's stages for a DevicePipeline: `fill` (observed by the core's
// observer), the two-phase copy of `core`, and host buffers from its
// device with room for the labels after the pixels. The functions hold `core`
// by plain pointer: it must outlive the Pipeline they are given to.
StageFunctions stage_functions(TransferCore* core, Filler fill, std::size_t batch_size, const Interrupt& interrupted) {
  StageFunctions stages;
  stages.fill = std::move(fill);
  stages.observer = core->observer;
  const std::shared_ptr<Device>& device = core->device;
  stages.transfer = [core](Batch& b) { core->transfer(b); };
  stages.finish = [core](Batch& b) { core->finish(b); };
  stages.transfer_would_wait = [core] { return core->transfer_would_wait(); };
  stages.on_stop = [core] {  // wakes a delivery thread waiting for a slot, or for a batch step
    core->free_slots.close();
    for (auto& step : core->steps) step->stop();
  };
  if (!core->steps.empty()) {
    stages.filled = [core](const Batch& b) noexcept {
      for (auto& step : core->steps) step->filled(b);
    };
  }
  // Host buffers from the device: pinned on CUDA, so the copy is a true async DMA.
  stages.allocator.name = device->backend() == Backend::cuda ? "cuda pinned" : "host";
  const std::size_t tail = label_tail_bytes(batch_size);  // room for the labels after the pixels
  stages.allocator.interrupted = interrupted;  // polled between buffers and by allocate_host_interruptibly
  stages.allocator.allocate = [device, tail, interrupted](std::size_t bytes) {
    return device->allocate_host_interruptibly(bytes + tail, interrupted);
  };
  stages.allocator.deallocate = [device](void* p, std::size_t) { device->free_host(p); };
  if (device->poisons_released()) {
    stages.allocator.recycle = [](std::byte* p, std::size_t bytes) { std::memset(p, kPoison, bytes); };
  }
  return stages;
}
}  // namespace

DevicePipeline::DevicePipeline(const Config& config, std::size_t dataset_size, Filler fill, TransferConfig transfer,
                               std::shared_ptr<Device> device, std::optional<PipelineState> resume) {
  if (!device) throw std::invalid_argument("device pipeline: device is required");
  if (!fill) throw std::invalid_argument("pipeline: stages.fill is required");
  config.validate();
  if (transfer.normalize) validate_normalization(*transfer.normalize, config.sample_bytes);
  core_ = make_core(config, transfer, device);
  // The stages hold a plain pointer: core_ outlives pipeline_ (declared before it).
  StageFunctions stages = stage_functions(core_.get(), std::move(fill), config.batch_size, transfer.interrupted);
  // A batch held keeps its host buffer too (its indices and labels; handed
  // over, its bytes), so the host pool bounds it as well, copying or not.
  // The pool holds a buffer for every slot set up, whatever the depth.
  max_held_ = std::min(core_->slot_count.load(), config.host_buffer_count());
  if (config.tune_device_queue) {
    // On the core's tuning thread, before the device queue widens to
    // `depth`: that depth's slots. A slot the device cannot give leaves the
    // depth where it was (PoolAllocationError), the run goes on.
    stages.deepen_device_queue = [this, config](std::size_t depth) {
      Config at = config;
      at.device_queue_depth = depth;
      try {
        core_->add_slots(at.device_buffer_count());
      } catch (const DeviceError& e) {
        throw PoolAllocationError(std::string("device pool: ") + e.what());
      }
      max_held_.store(std::min(core_->slot_count.load(), config.host_buffer_count()));
    };
  }
  pipeline_ = std::make_unique<Pipeline>(config, dataset_size, std::move(stages), std::move(resume));
}

DevicePipeline::~DevicePipeline() {
  stop();  // joins the workers: the steps hear of no batch after this
  for (auto& step : core_->steps) step->pipeline_ended();
}

// The core marks itself stopping and then calls on_stop, which closes the free
// slots: a delivery thread woken there is seen as stopping, not failing.
void DevicePipeline::stop() {
  stopped_ = true;
  pipeline_->stop();
}

Device& DevicePipeline::device() const { return *core_->device; }
std::size_t DevicePipeline::device_slots() const { return core_->slot_count.load(); }
std::size_t DevicePipeline::held_slots() const { return core_->held.load(); }

bool DevicePipeline::wait_ready(std::chrono::microseconds timeout) {
  if (stopped_ || core_->held.load() >= max_held_.load()) return true;
  {
    std::lock_guard lk(core_->error_mu);
    if (!core_->consumer_error.empty()) return true;
  }
  return pipeline_->wait_ready(timeout);
}

void DevicePipeline::throw_if_consumer_failed() const {
  std::lock_guard lk(core_->error_mu);
  if (!core_->consumer_error.empty()) {
    throw PipelineError("consumer", PipelineError::kNoSample, PipelineError::kNoSample, core_->consumer_error,
                        core_->consumer_cause);
  }
}

std::optional<DeviceBatch> DevicePipeline::next() {
  throw_if_consumer_failed();
  const Observed observed(core_->observer.get(), {Work::next, 0, 0, 0});
  if (stopped_) return std::nullopt;
  if (const std::size_t most = max_held_.load(); core_->held.load() >= most) {
    // The delivery thread (or the workers, for a host buffer) needs one of
    // them back before it can publish again.
    const std::size_t slots = core_->slot_count.load();
    if (most < slots) {
      throw std::logic_error("device pipeline: the consumer holds " + std::to_string(most) +
                             " batch(es), every buffer of the host pool (a batch held keeps its host buffer); "
                             "release a batch before taking another (or raise host_buffers)");
    }
    throw std::logic_error("device pipeline: all " + std::to_string(slots) +
                           " device slots are held by the consumer; release a batch before taking another "
                           "(or raise device_buffers" +
                           (slots < core_->max_slots ? ", or fix device_queue: a tuned one adds slots only as it deepens"
                                                     : "") +
                           ")");
  }
  auto host = pipeline_->next();
  if (!host) {
    // A release that failed on another thread while this one waited (a
    // tensor's deleter) may have come after the last batch: the stream's end
    // must not hide it.
    throw_if_consumer_failed();
    return std::nullopt;
  }
  auto* slot = static_cast<DeviceSlot*>((*host)->user);
  DeviceBatch batch;
  batch.core_ = core_;
  batch.slot_ = slot;
  batch.generation_ = slot->copied_generation;
  batch.host_ = std::move(*host);
  ++core_->held;
  if (core_->config.normalize) {
    batch.data_ = slot->out->data();
    batch.dtype_ = core_->config.normalize->out_type;
  } else {
    batch.data_ = slot->source;
  }
  batch.labels_ = reinterpret_cast<const std::int64_t*>(slot->source + label_offset(batch.size(), core_->sample_bytes));
  for (const auto& step : core_->steps) step->extras(slot->id, batch.host(), batch.extras_);
  try {
    // The stream the consumer computes on now, when it says so at each call (LibTorch's current stream).
    if (core_->config.current_consumer_stream) {
      batch.stream_ = core_->device->wrap_stream(core_->config.current_consumer_stream());
    }
    Stream& consumer = batch.stream_ ? *batch.stream_ : *core_->consumer_stream;
    core_->device->wait(consumer, *slot->copied);  // 6: the consumer's stream waits, not the host
  } catch (const std::exception& e) {
    // As promised, PipelineError, and it sticks. `batch` is released after the
    // error is kept, so its own release, likely failing too, does not replace it.
    core_->fail("taking a batch", e.what(), std::current_exception());
    throw PipelineError("consumer", batch.host().epoch, PipelineError::kNoSample, "taking a batch: " + std::string(e.what()),
                        std::current_exception());
  }
  return batch;
}

DevicePipeline::EpochRange DevicePipeline::epoch(std::uint64_t e) {
  return EpochRange(this, pipeline_->epoch(e).size());
}

}  // namespace conveyor
