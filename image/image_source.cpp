#include "image/image_source.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "image/image_ops.h"
#include "image/photometric.h"

namespace conveyor {

struct ImageSource::Worker {
  ImageDecoder decoder;
  std::vector<unsigned char> file;
  ResizeScratch resize;
  // With ImageConfig::normalize: the uint8 render (small enough to stay in
  // cache) that to_float_chw() then writes into the slot, and its table.
  std::vector<unsigned char> pixels;
  std::optional<NormalizeTable> normalize;
  // The colour transforms drawn for the sample, and their scratch.
  std::vector<PixelOp> pixel_ops;
  PhotometricScratch photometric;
  // With ImageConfig::views: each view's draws, kept so a sample allocates nothing.
  struct ViewDraw {
    Geometry g;
    std::vector<PixelOp> ops;
  };
  std::vector<ViewDraw> views;
  Worker(const ImageConfig& config, std::size_t pixel_bytes) : decoder(config.limits, config.jpeg_scales) {
    if (config.normalize) {
      pixels.resize(pixel_bytes);
      normalize.emplace(*config.normalize);
    }
  }
};

// What a Filler holds of its ImageSource: the source while it lives, and how
// many calls are inside it, so that the destructor can wait for them.
class ImageSource::Liveness {
 public:
  explicit Liveness(ImageSource* source) : source_(source) {}
  // Runs f on the source; false, without running it, once the source is gone.
  template <typename F>
  bool run(F&& f) {
    ImageSource* source = nullptr;
    {
      std::lock_guard lk(mu_);
      if (!source_) return false;
      source = source_;
      ++inside_;
    }
    struct Leave {
      Liveness& l;
      ~Leave() {
        {
          std::lock_guard lk(l.mu_);
          --l.inside_;
        }
        l.idle_.notify_all();
      }
    } leave{*this};
    f(*source);
    return true;
  }
  // No call starts after this; returns once none is inside.
  void end() {
    std::unique_lock lk(mu_);
    source_ = nullptr;
    idle_.wait(lk, [this] { return inside_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  ImageSource* source_;     // guarded by mu_; null once the source is gone
  std::size_t inside_ = 0;  // guarded by mu_
};

namespace {

// The config with its FileSystem default filled in: the dataset's files(),
// else posix_file_system().
ImageConfig with_file_system(ImageConfig c, const Dataset& dataset) {
  if (!c.files) c.files = dataset.files() ? dataset.files() : posix_file_system();
  return c;
}

// The chain ImageSource's augment_ is built from: the transforms, or the first view's.
const std::vector<Transform>& main_chain(const ImageConfig& c) {
  return c.views.empty() ? c.transforms : c.views.front().transforms;
}

// The bounding box of two regions, an empty one (w or h 0) taking the other.
Rect union_of(const Rect& a, const Rect& b) {
  if (a.w <= 0 || a.h <= 0) return b;
  if (b.w <= 0 || b.h <= 0) return a;
  const int x = std::min(a.x, b.x), y = std::min(a.y, b.y);
  return {x, y, std::max(a.x + a.w, b.x + b.w) - x, std::max(a.y + a.h, b.y + b.h) - y};
}

}  // namespace

ImageSource::ImageSource(Dataset dataset, ImageConfig config, std::size_t workers)
    : dataset_(std::move(dataset)),
      config_(with_file_system(std::move(config), dataset_)),
      augment_(main_chain(config_)),
      reader_(dataset_, config_.files, config_.limits.max_file_bytes, config_.max_open_shards) {
  if (workers == 0) throw std::invalid_argument("image source: workers must be at least 1");
  if (!(config_.gpu_share >= 0 && config_.gpu_share <= 1)) {
    throw std::invalid_argument("image source: gpu_share " + std::to_string(config_.gpu_share) + " is not in [0, 1]");
  }
  if (config_.gpu_share > 0 && config_.normalize) {
    throw std::invalid_argument("image source: gpu_share needs the device to normalize, not the workers (normalize)");
  }
  std::size_t largest = std::size_t(output().height) * output().width * 3;
  for (std::size_t v = 0; v < config_.views.size(); ++v) {
    const ViewSpec& spec = config_.views[v];
    const std::string which = "image source: views[" + std::to_string(v) + "]: ";
    if (spec.count == 0) throw std::invalid_argument(which + "count must be at least 1");
    try {
      view_augments_.emplace_back(spec.transforms);
    } catch (const AugmentError& e) {
      throw AugmentError(which + e.what());
    }
    const Augment& a = view_augments_.back();
    if (const char* t = a.device_transform()) {
      throw std::invalid_argument(which + t + " is not supported with views (it runs on whole batches)");
    }
    const Size out = a.output();
    const std::size_t pixels = std::size_t(out.height) * out.width * 3;
    largest = std::max(largest, pixels);
    for (std::size_t c = 0; c < spec.count; ++c) {
      const std::size_t offset = layout_.empty() ? 0 : layout_.back().offset + layout_.back().bytes;
      layout_.push_back({v, c, offset, pixels * (config_.normalize ? sizeof(float) : 1), out});
    }
  }
  if (!config_.views.empty() && config_.gpu_share > 0) {
    throw std::invalid_argument("image source: gpu_share is not supported with views (each view is a crop of one decode)");
  }
  workers_.reserve(workers);
  if (config_.normalize) {
    if (const auto p = normalize_problem(*config_.normalize, 3)) {
      throw std::invalid_argument("image source: normalize." + p->field + " " + p->problem);
    }
  }
  for (std::size_t w = 0; w < workers; ++w) workers_.push_back(std::make_unique<Worker>(config_, largest));
  live_ = std::make_shared<Liveness>(this);
}

ImageSource::~ImageSource() { live_->end(); }

std::size_t ImageSource::sample_bytes() const {
  if (!layout_.empty()) return layout_.back().offset + layout_.back().bytes;
  return std::size_t(output().height) * output().width * 3 * (config_.normalize ? sizeof(float) : 1);
}

Filler ImageSource::filler() {
  Filler::Prefetch advice;
  if (config_.read_ahead) {
    advice = [live = live_](std::span<const std::uint64_t> indices) {
      (void)live->run([&](ImageSource& s) { s.prefetch(indices); });
    };
  }
  return Filler(
      [live = live_](Sample& sample) {
        if (!live->run([&](ImageSource& s) { s.fill(sample); })) {
          throw std::logic_error("ImageSource: destroyed before the pipeline that calls it (destroy the pipeline first)");
        }
      },
      std::move(advice));
}

void ImageSource::prefetch(std::span<const std::uint64_t> indices) { reader_.advise(indices); }

void ImageSource::render_sample(std::size_t index, Rng& rng, std::span<unsigned char> out, std::size_t worker,
                                const std::atomic<bool>* stopping) {
  process(index, rng, out, worker, stopping, std::nullopt);
}

void ImageSource::process(std::size_t index, Rng& rng, std::span<unsigned char> out, std::size_t worker,
                          const std::atomic<bool>* stopping, std::optional<std::uint64_t> defer_epoch) {
  Worker& w = *workers_.at(worker);
  if (out.size() != sample_bytes()) {
    throw std::invalid_argument("image source: render_sample needs " + std::to_string(sample_bytes()) +
                                " bytes, got " + std::to_string(out.size()));
  }
  if (config_.normalize && reinterpret_cast<std::uintptr_t>(out.data()) % alignof(float) != 0) {
    throw std::invalid_argument("image source: normalized samples need float-aligned memory");
  }
  try {
    reader_.read(index, w.file, stopping);
    const ImageInfo info = w.decoder.open(w.file);
    if (!layout_.empty()) return process_views(w, info, rng, out);
    const Geometry g = augment_.plan(info.width, info.height, rng);
    augment_.plan_pixels(rng, w.pixel_ops);
    // The GPU path renders the crop alone: a chain with colour transforms stays on the CPU.
    if (defer_epoch && !augment_.has_pixel_ops() && gpu_decodable(info, g) && gpu_decodes(index, config_.gpu_share)) {
      DeferredDecode d = deferred_->blank();  // a recycled entry: its buffer becomes the worker's next file buffer
      d.name = dataset_.name(index);
      std::swap(d.file, w.file);
      d.width = info.width;
      d.height = info.height;
      d.geometry = g;
      deferred_->put(*defer_epoch, index, std::move(d));
      return;
    }
    const DecodeRequest want = decode_request(g, info.width, info.height);
    draw(w, w.decoder.decode(want.region, want.min_scale), info, g, w.pixel_ops, out);
  } catch (const ReadCancelled&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(dataset_.name(index) + ": " + e.what());
  }
}

void ImageSource::process_views(Worker& w, const ImageInfo& info, Rng& rng, std::span<unsigned char> out) {
  // Every view's draws first, in layout order (the bytes depend on the Rng
  // alone), then one decode of what they all need.
  std::vector<Worker::ViewDraw>& drawn = w.views;
  drawn.resize(layout_.size());
  DecodeRequest want;
  for (std::size_t k = 0; k < layout_.size(); ++k) {
    const Augment& a = view_augments_[layout_[k].spec];
    drawn[k].g = a.plan(info.width, info.height, rng);
    a.plan_pixels(rng, drawn[k].ops);
    const DecodeRequest r = decode_request(drawn[k].g, info.width, info.height);
    want.region = k == 0 ? r.region : union_of(want.region, r.region);
    want.min_scale = k == 0 ? r.min_scale : std::max(want.min_scale, r.min_scale);
  }
  const DecodedView view = w.decoder.decode(want.region, want.min_scale);
  for (std::size_t k = 0; k < layout_.size(); ++k) {
    draw(w, view, info, drawn[k].g, drawn[k].ops, out.subspan(layout_[k].offset, layout_[k].bytes));
  }
}

void ImageSource::draw(Worker& w, const DecodedView& view, const ImageInfo& info, const Geometry& g,
                       const std::vector<PixelOp>& ops, std::span<unsigned char> out) const {
  const std::size_t pixels = std::size_t(g.out.height) * g.out.width * 3;
  const std::span<unsigned char> rgb = w.normalize ? std::span<unsigned char>(w.pixels.data(), pixels) : out;
  render(view, g, info.width, info.height, config_.pad_value, rgb, w.resize);
  if (!ops.empty()) {
    apply_pixel_ops(ops, RgbView{rgb.data(), g.out.width, g.out.height, std::ptrdiff_t(g.out.width) * 3}, w.photometric);
  }
  if (w.normalize) {
    to_float_chw(rgb, g.out.height, g.out.width, *w.normalize, {reinterpret_cast<float*>(out.data()), out.size() / sizeof(float)});
  }
}

void ImageSource::fill(Sample& s) {
  if (s.data.size() != sample_bytes()) {
    throw std::invalid_argument("image source: the pipeline's sample_bytes is " + std::to_string(s.data.size()) +
                                " but " + (layout_.empty() ? augment_.describe() : std::to_string(layout_.size()) + " views") +
                                " writes " + std::to_string(sample_bytes()));
  }
  // Neither is the sample's fault either: thrown before the try, so no skip policy turns them into skips.
  if (s.worker >= workers_.size()) {
    throw std::logic_error("image source: built for " + std::to_string(workers_.size()) +
                           " worker(s), but the pipeline's worker " + std::to_string(s.worker) +
                           " (counted from 0) called it: give ImageSource the pipeline's Config::workers");
  }
  if (s.index >= dataset_.size()) {
    throw std::logic_error("image source: sample index " + std::to_string(s.index) + " is past the dataset's " +
                           std::to_string(dataset_.size()) + " samples (the pipeline's dataset_size is larger)");
  }
  if (config_.gpu_share > 0 && !deferred_->attached()) {  // not the sample's fault: no skip policy applies
    throw std::logic_error("image source: gpu_share is set but no pipeline decodes for it "
                           "(a DevicePipeline whose TransferConfig::batch_steps hold a GpuDecode over deferred_decodes())");
  }
  try {
    const auto defer = config_.gpu_share > 0 ? std::optional<std::uint64_t>(s.epoch) : std::nullopt;
    process(std::size_t(s.index), s.rng, {reinterpret_cast<unsigned char*>(s.data.data()), s.data.size()}, s.worker,
            s.stopping, defer);
  } catch (const ReadCancelled&) {
    return;  // the pipeline is stopping: this sample is discarded with its batch
  } catch (const std::exception& e) {
    if (config_.on_error == ErrorPolicy::skip) return s.skip(e.what());
    throw;
  }
  s.label = dataset_.label(std::size_t(s.index));
}

}  // namespace conveyor
