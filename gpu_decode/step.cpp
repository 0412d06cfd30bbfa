// The GPU decode path's BatchStep: the feed's decoded jobs rendered into each
// slot on the copy stream, and the CPU fall-back for files the decoder
// refused. The protocol point cited is docs/cuda.md's ("One slot's life", 13).
#include "gpu_decode/step.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu_decode/feed.h"
#include "image/decode.h"

namespace conveyor {
namespace {

class GpuDecodeStep final : public BatchStep {
 public:
  GpuDecodeStep(const GpuDecode& settings, const BatchStepSetup& setup)
      : device_(setup.device), on_error_(settings.on_error), limits_(settings.limits), sample_bytes_(setup.sample_bytes),
        jobs_(setup.slots) {
    const auto& decoders = settings.decoders;
    const std::size_t threads =
        settings.threads ? std::min(settings.threads, decoders.size()) : (decoders.size() + 1) / 2;
    auto store = settings.deferred;
    // One pipeline at a time per source: entries an earlier one left are dropped,
    // and the source defers only while this pipeline is there to decode.
    store->attach();
    attachment_ = std::shared_ptr<void>(nullptr, [store](void*) { store->detach(); });
    feed_ = std::make_unique<GpuDecodeFeed>(setup.device, settings.deferred, decoders, threads);
  }
  ~GpuDecodeStep() override {
    feed_.reset();  // joins its threads and waits for its decodes, before the jobs' storage goes
  }

  void filled(const Batch& b) noexcept override { feed_->filled(b); }

  void prepare(Batch& batch, std::size_t slot) override { jobs_.at(slot) = take_decoded(batch); }

  void complete(std::size_t slot, std::byte* samples, Stream& copy) override {
    GpuDecodeFeed::Job* job = jobs_.at(slot);
    if (!job) return;
    for (std::size_t k = 0; k < job->items.size(); ++k) {
      if (!job->refused[k].empty()) continue;  // decoded on the CPU (in the copy), or dropped
      job->items[k].dst = reinterpret_cast<std::uint8_t*>(samples) + job->slot[k] * sample_bytes_;
    }
    device_->wait(copy, *job->decoded);  // 13: rendered after the feed's decode on the device's timeline
    job->decoder->render(job->items, job->refused, copy);
  }

  // The slot's job back to the feed (its decoder free, its entries recycled).
  void release(std::size_t slot) noexcept override {
    if (slot >= jobs_.size()) return;
    feed_->release(std::exchange(jobs_[slot], nullptr));
  }

  void stop() noexcept override { feed_->stop(); }
  void pipeline_ended() noexcept override { attachment_.reset(); }

  // With one decoder, the next batch's decode needs the decoder the batch in
  // flight renders from, freed only when that batch is finished.
  bool next_waits_for_release() const override { return feed_->decoders() < 2; }

  std::optional<StageStats> stage(double wall_s, Clock::time_point now) const override {
    return feed_->stats(wall_s, now);
  }

  GpuDecodeCounts counts() const { return {decoded_.load(), fallbacks_.load()}; }

 private:
  struct Fallback {
    std::unique_ptr<ImageDecoder> cpu;
    std::vector<unsigned char> scratch;  // one rendered sample
  };

  // The batch's decoded job from the feed (null when it has no deferred
  // sample); its wait counts as the delivery stage starved. A file the
  // decoder refused is rendered here on the CPU into the host buffer, which
  // the copy then carries; one the CPU refuses too is an error or, skipping,
  // removed from the batch.
  GpuDecodeFeed::Job* take_decoded(Batch& batch) {
    GpuDecodeFeed::Job* job = feed_->take(batch, batch.transfer_starved_ns);
    if (!job) return nullptr;
    std::vector<std::size_t> drop;  // positions in the batch of samples neither decoder took
    try {
      for (std::size_t k = 0; k < job->items.size(); ++k) {
        if (job->refused[k].empty()) continue;
        if (!render_on_cpu(batch, *job, k)) drop.push_back(job->slot[k]);
      }
    } catch (...) {
      feed_->release(job);  // nothing of it was enqueued on the copy stream
      throw;
    }
    // render() gets the very list decode() saw, since a decoder keeps its images
    // by position there; it skips the refused ones (the CPU's or dropped). The
    // accepted ones' positions move down past the dropped samples.
    std::size_t accepted = 0;
    for (std::size_t k = 0; k < job->items.size(); ++k) {
      if (!job->refused[k].empty()) continue;
      ++accepted;
      job->slot[k] -= std::size_t(std::lower_bound(drop.begin(), drop.end(), job->slot[k]) - drop.begin());
    }
    decoded_ += accepted;
    if (!drop.empty()) remove_samples(batch, drop);
    return job;
  }

  // The CPU fall-back for item k of `job`, which the device's decoder refused:
  // rendered into its place in the host buffer. False when the CPU refuses it
  // too and the policy skips it (listed in batch.skipped); throws when it fails.
  bool render_on_cpu(Batch& batch, const GpuDecodeFeed::Job& job, std::size_t k) {
    const DeferredDecode& e = job.taken[k];
    try {
      Fallback& f = fallback_;
      if (!f.cpu) f.cpu = std::make_unique<ImageDecoder>(limits_, std::vector<int>{8});
      const ImageInfo info = f.cpu->open(e.file);
      const DecodedView v = f.cpu->decode({0, 0, info.width, info.height}, 1.0);
      f.scratch.resize(sample_bytes_);
      render_gpu_twin(v.pixels, v.width, v.height, v.stride, e.geometry, f.scratch);
      std::memcpy(batch.data + job.slot[k] * sample_bytes_, f.scratch.data(), sample_bytes_);
      ++fallbacks_;
      return true;
    } catch (const std::exception& cpu_error) {
      const std::string reason = e.name + ": " + cpu_error.what() + " (the GPU decoder: " + job.refused[k] + ")";
      if (on_error_ == ErrorPolicy::fail) throw std::runtime_error(reason);
      batch.skipped.push_back({batch.epoch, batch.indices[job.slot[k]], reason});
      return false;
    }
  }

  // Removes the samples at `positions` (ascending) from the host batch; later ones move down.
  void remove_samples(Batch& batch, const std::vector<std::size_t>& positions) const {
    std::size_t out = 0, p = 0;
    for (std::size_t j = 0; j < batch.indices.size(); ++j) {
      if (p < positions.size() && positions[p] == j) {
        ++p;
        continue;
      }
      if (out != j) {
        batch.indices[out] = batch.indices[j];
        batch.labels[out] = batch.labels[j];
        std::memmove(batch.data + out * sample_bytes_, batch.data + j * sample_bytes_, sample_bytes_);
      }
      ++out;
    }
    batch.indices.resize(out);
    batch.labels.resize(out);
  }

  const std::shared_ptr<Device> device_;
  const ErrorPolicy on_error_;
  const DecodeLimits limits_;
  const std::size_t sample_bytes_;
  // Detaches the deferred store at pipeline_ended() or, failing that, when the step goes.
  std::shared_ptr<void> attachment_;
  // Per slot: the job of the batch in it, from prepare() until release(); the delivery thread's alone.
  std::vector<GpuDecodeFeed::Job*> jobs_;
  Fallback fallback_;  // the delivery thread's alone
  std::atomic<std::uint64_t> decoded_{0}, fallbacks_{0};
  std::unique_ptr<GpuDecodeFeed> feed_;  // last: its threads stop before the members above go
};

}  // namespace

std::unique_ptr<BatchStep> GpuDecode::operator()(const BatchStepSetup& setup) const {
  if (!deferred) throw ConfigError("gpu_decode.deferred", "is required (ImageSource::deferred_decodes())");
  if (decoders.empty() || std::find(decoders.begin(), decoders.end(), nullptr) != decoders.end()) {
    throw ConfigError("gpu_decode.decoders", "must be one or more decoders (create_jpeg_decoder)");
  }
  return std::make_unique<GpuDecodeStep>(*this, setup);
}

const GpuDecode* gpu_decode_of(const TransferConfig& transfer) {
  for (const auto& make : transfer.batch_steps) {
    if (const auto* gpu = make.target<GpuDecode>()) return gpu;
  }
  return nullptr;
}

GpuDecodeCounts gpu_decode_counts(const DevicePipeline& pipeline) {
  GpuDecodeCounts counts;
  for (const BatchStep* step : pipeline.batch_steps()) {
    if (const auto* gpu = dynamic_cast<const GpuDecodeStep*>(step)) {
      const GpuDecodeCounts c = gpu->counts();
      counts.decoded += c.decoded;
      counts.cpu_fallbacks += c.cpu_fallbacks;
    }
  }
  return counts;
}

}  // namespace conveyor
