#include "python/loader.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "device/memory_budget.h"
#include "source/source.h"
#include "pipeline/fnv1a.h"
#include "pipeline/pipeline.h"
#include "pipeline/sampler.h"

namespace conveyor::python {

Element element_of(DType t) {
  switch (t) {
    case DType::uint8: return {'u', 8};
    case DType::float32: return {'f', 32};
    case DType::float16: return {'f', 16};
    case DType::bfloat16: return {'b', 16};
  }
  return {};
}

namespace {
std::size_t product(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) n = saturating_mul(n, std::size_t(d));
  return n;
}
}  // namespace

Loader::Loader(LoaderSettings settings, std::size_t dataset_size, std::size_t sample_bytes)
    : settings_(std::move(settings)), dataset_size_(dataset_size) {
  if (dataset_size == 0) throw std::invalid_argument("dataset: no samples");
  settings_.config.sample_bytes = sample_bytes;
  settings_.config.validate();
  // The core takes an epoch of no batches (ranks of a tiny dataset share even
  // counts, all 0); a Python loop over such a loader yields nothing, forever,
  // without a word, so it is refused here.
  if (const Sampler sampler(settings_.config.sampler_options(dataset_size)); sampler.batches_per_epoch() == 0) {
    const auto& c = settings_.config;
    const std::string held = c.world_size > 1 ? "rank " + std::to_string(c.rank) + "'s share holds " +
                                                    std::to_string(sampler.shard_size()) + " of the " +
                                                    std::to_string(dataset_size) + " samples (world_size " +
                                                    std::to_string(c.world_size) + ")"
                                              : "the dataset holds " + std::to_string(dataset_size) + " samples";
    throw std::invalid_argument("no batch in an epoch: " + held +
                                (sampler.shard_size() > 0 ? ", fewer than batch_size " + std::to_string(c.batch_size) +
                                                                " with drop_last=True"
                                                          : std::string()));
  }
  // A CPU consumer reads the workers' buffers in place (handover) when the host backend is the one
  // opened; a GPU, when auto finds one, is opened as it is. One probe, and the reason auto gives.
  settings_.device.handover_if_host = true;
  device_ = open_device(settings_.device);
  transfer_.interrupted = settings_.interrupted;
  // Each batch the consumer holds keeps one of the host pool's buffers; the
  // default pool (Config::host_buffer_count) has one for each device slot
  // beside those the workers and the host queue use, so device_buffers= is
  // what the consumer may hold (past the pool, next() would wait for ever).
  if (device_->backend() == Backend::cuda) {
    transfer_.current_consumer_stream = [this] { return stream_; };
  }
}

Loader::Loader(Dataset dataset, ImageConfig image, LoaderSettings settings)
    : Loader(std::move(settings), dataset.size(), 0) {
  num_classes_ = dataset.num_classes();
  classes_ = dataset.classes();
  dataset_digest_ = dataset.name_digest();
  ImageSourceParts parts =
      build_image_source(std::move(dataset), std::move(image), settings_.config.workers, settings_.gpu_decode, *device_, transfer_);
  images_ = std::move(parts.images);
  gpu_ = std::move(parts.gpu);
  settings_.config.sample_bytes = images_->sample_bytes();
  const Size out = images_->output();
  if (const char* device_op = images_->augment().device_transform(); device_op && !settings_.normalize) {
    const std::string op = device_op;
    throw std::invalid_argument("transforms=: " + op + " follows Normalize, on the device: give normalize= " +
                                "(float32, float16 or bfloat16)");
  }
  if (settings_.normalize) {
    transfer_.normalize = device_normalization(*images_, *settings_.normalize);
    validate_normalization(*transfer_.normalize, settings_.config.sample_bytes);
    sample_shape_ = {3, out.height, out.width};
    element_ = element_of(*settings_.normalize);
  } else {
    sample_shape_ = {out.height, out.width, 3};
  }
  check_memory();
}

Loader::Loader(ArrayRows rows, LoaderSettings settings)
    : Loader(std::move(settings), rows.labels.size(),
             saturating_mul(product(rows.row_shape), std::size_t(rows.element.bits / 8))) {
  labels_ = std::move(rows.labels);
  // As a list or folder dataset's labels: 0 to kMaxLabel, so num_classes = max + 1 fits.
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    const std::int64_t l = labels_[i];
    if (l < 0 || l > kMaxLabel) {
      throw std::invalid_argument("arrays: y[" + std::to_string(i) + "] = " + std::to_string(l) + ": a label must be 0 to " +
                                  std::to_string(kMaxLabel));
    }
    num_classes_ = std::max(num_classes_, l + 1);
  }
  rows_ = std::make_unique<ArraySource>(rows.data, settings_.config.sample_bytes, labels_);
  Fnv1a h;
  for (const std::int64_t d : rows.row_shape) h.add_value(d);
  h.add_value(rows.element.kind);
  h.add_value(rows.element.bits);
  h.add(labels_.data(), labels_.size() * sizeof labels_[0]);
  const std::size_t row = settings_.config.sample_bytes, n = labels_.size();
  for (std::size_t k = 0; k < std::min<std::size_t>(64, n); ++k) h.add(rows.data.data() + (k * n / std::min<std::size_t>(64, n)) * row, row);
  dataset_digest_ = h.value;
  sample_shape_ = rows.row_shape;
  element_ = rows.element;
  if (settings_.normalize) {
    const auto& s = rows.row_shape;
    if (element_ != Element{'u', 8} || s.size() != 3 || s[2] < 1 || s[2] > 3) {
      throw std::invalid_argument("normalize: needs uint8 rows of shape [H, W, C] with C 1..3 (images)");
    }
    transfer_.normalize =
        TransferConfig::Normalization{std::size_t(s[0]), std::size_t(s[1]), std::size_t(s[2]), Normalize{},
                                      *settings_.normalize};
    validate_normalization(*transfer_.normalize, settings_.config.sample_bytes);
    sample_shape_ = {s[2], s[0], s[1]};
    element_ = element_of(*settings_.normalize);
  }
  check_memory();
}

void Loader::check_memory() const {
  static const MemorySettingNames kNames{"batch_size", "", "workers", "host_queue", "device_queue", "max_memory_mb"};
  const Config& c = settings_.config;
  const MemoryEstimate need = estimate_memory(c, dataset_size_, transfer_, *device_, labels_.size() * sizeof labels_[0]);
  const std::string refusal = memory_refusal(need, c, *device_, settings_.max_memory_mb, kNames);
  if (!refusal.empty()) throw std::invalid_argument(refusal);
}

Loader::~Loader() { close(); }

std::size_t Loader::batches_per_epoch() const {
  return Sampler(settings_.config.sampler_options(dataset_size_)).batches_per_epoch();
}

PipelineState Loader::state() const {
  if (pipeline_) return pipeline_->state();
  return pending_ ? *pending_ : initial_state(settings_.config, dataset_size_);
}

void Loader::start(std::optional<PipelineState> from) {
  if (closed_) throw std::logic_error("loader: closed");
  if (pipeline_) {
    for (const SkippedSample& s : pipeline_->skipped()) skipped_before_.add(s);
    pipeline_.reset();  // stops and joins its threads; batches still held stay valid
  }
  const Filler fill = images_ ? images_->filler() : rows_->filler();
  pipeline_ = std::make_unique<DevicePipeline>(settings_.config, dataset_size_, fill, transfer_, device_, std::move(from));
}

void Loader::seek(const PipelineState& state) {
  const PipelineState before = this->state();
  try {
    pending_ = state;
    start(state);
  } catch (...) {
    // Refused (a state from other settings): the consumer stays where it was;
    // the next call restarts the pipeline there, bit-identical.
    pending_ = before;
    pipeline_.reset();
    throw;
  }
}

bool Loader::wait_ready(std::chrono::microseconds timeout) {
  if (closed_) return true;
  if (!pipeline_) start(pending_);
  return pipeline_->wait_ready(timeout);
}

std::optional<DeviceBatch> Loader::next(void* stream) {
  if (closed_) return std::nullopt;
  if (!pipeline_) start(pending_);
  stream_ = stream;
  return pipeline_->next();
}

PipelineStats Loader::stats() const { return pipeline_ ? pipeline_->stats() : PipelineStats{}; }

std::vector<SkippedSample> Loader::skipped() const {
  SkipLog all = skipped_before_;
  if (pipeline_) {
    for (const SkippedSample& s : pipeline_->skipped()) all.add(s);
  }
  return all.entries();
}

void Loader::close() {
  if (closed_) return;
  closed_ = true;
  if (pipeline_) pipeline_->stop();
}

}  // namespace conveyor::python
