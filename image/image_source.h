// ImageSource: the sample filler for image datasets. For each sample it reads
// the file, decodes the part the augmentation needs, and writes a fixed-size
// uint8 HWC RGB image straight into the sample's slot of the batch buffer (or,
// with ImageConfig::normalize, a normalized float32 CHW one).
//
//   Dataset dataset = dataset_from_folder("train/");
//   ImageSource images(dataset, ImageConfig{}, config.workers);
//   config.sample_bytes = images.sample_bytes();
//   Pipeline pipeline(config, dataset.size(), {images.filler()});
//
// With ImageConfig::views (SimCLR's or DINO's several crops of each image),
// each sample holds every view, one after another, from one read and one
// decode of its file; views() says where each one is.
//
// With ImageConfig::gpu_share, some JPEG samples are only read and planned:
// their bytes wait in deferred_decodes() for the transfer stage's GPU decoder
// (device/device_pipeline.h), which writes their slots.
//
// Errors per sample follow ImageConfig::on_error: `fail` stops the pipeline
// (the consumer's PipelineError names the sample index, and the message names
// the file and the decoder's reason); `skip` leaves the sample out of its batch,
// which is delivered short, and lists it in Batch::skipped with path and reason.
//
// Thread safety: fill() may run concurrently for distinct Sample::worker values
// (each worker has its own decoder and file buffer).
// Lifetime: destroy the pipeline before its ImageSource. The other order is
// safe, not useful: the Fillers that filler() hands out hold the source
// weakly, the destructor waits for the fills and prefetches in progress, and
// every later fill throws std::logic_error "ImageSource: destroyed before the
// pipeline that calls it", which the pipeline's consumer gets as its
// PipelineError (prefetch advice is dropped).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipeline/pipeline.h"
#include "image/augment.h"
#include "data/dataset.h"
#include "image/decode.h"
#include "data/file_system.h"
#include "data/reader.h"
#include "image/gpu_decode_plan.h"
#include "image/normalize.h"

namespace conveyor {

enum class ErrorPolicy {
  fail,  // the first bad sample stops the pipeline
  skip,  // bad samples are left out, counted and listed
};

// Where one view of a multi-view sample lies in it (ImageSource::views()).
struct ViewLayout {
  std::size_t spec = 0;    // its ViewSpec in ImageConfig::views
  std::size_t copy = 0;    // 0 .. count - 1 within that spec
  std::size_t offset = 0;  // bytes from the sample's start
  std::size_t bytes = 0;   // out.height * out.width * 3, times 4 with ImageConfig::normalize
  Size out;
};

struct ImageConfig {
  // Default: RandomResizedCrop(224) + RandomHorizontalFlip(0.5), the ImageNet training recipe.
  std::vector<Transform> transforms = preset_transforms(kDefaultAugmentPreset, kDefaultCrop);
  // Multi-view (SimCLR, DINO): when not empty, every sample is each spec's
  // `count` views, spec after spec, e.g. {{2, global}, {6, local}}: 2 crops
  // drawn with `global`, then 6 with `local`. The file is read and decoded once
  // (the region all views need, at the finest scale any needs), then each view
  // drawn, rendered and coloured in that order with the sample's Rng, so the
  // bytes are the same for any worker count. `transforms` is then unused, and
  // neither gpu_share nor RandomErasing, MixUp or CutMix is allowed (each is
  // refused with std::invalid_argument). Default: empty, one view.
  std::vector<ViewSpec> views;
  // Default: 64 MP and 256 MiB (see DecodeLimits).
  DecodeLimits limits;
  // Default: default_jpeg_scales(), the reduced DCT scales that measured faster.
  std::vector<int> jpeg_scales = default_jpeg_scales();
  // Default: fail.
  ErrorPolicy on_error = ErrorPolicy::fail;
  // Value of padded pixels (RandomCrop padding, CenterCrop larger than the image). Default: 0.
  unsigned char pad_value = 0;
  // Normalize in the workers: each sample becomes float32 CHW, (x / 255 - mean)
  // / std per channel, bit for bit what the device's normalize computes. For a
  // consumer on the CPU (the host backend handing buffers over), where the
  // workers then share the work instead of the one thread of the host
  // backend's normalize stream doing it; with a GPU leave it unset and
  // normalize on the device, which moves 4x fewer bytes. Default: unset
  // (uint8 HWC).
  std::optional<Normalize> normalize;
  // Shard datasets: shard files kept open at once, shared by the workers (the
  // least recently used is closed beyond it; data/reader.h). Default: 256.
  std::size_t max_open_shards = SampleReader::kDefaultMaxOpenShards;
  // Shard datasets: tell the kernel, one batch ahead, which byte ranges the
  // workers will read (see prefetch()), so cold reads overlap decoding.
  // Default: true.
  bool read_ahead = true;
  // The GPU decode path: the share of samples (by gpu_decodes(),
  // among those gpu_decodable()) the workers do not decode but leave, read and
  // planned, in deferred_decodes() for the transfer stage to decode
  // (gpu_decode/step.h, GpuDecode). Incompatible with `normalize` (the device
  // normalizes). Default: 0, every sample on the CPU.
  double gpu_share = 0;
  // Where files are read from. Default: null, meaning the dataset's files(),
  // else posix_file_system();
  // tests pass one that injects faults.
  std::shared_ptr<FileSystem> files;
};

class ImageSource {
 public:
  // Throws AugmentError for a bad transform chain, std::invalid_argument for
  // bad scales, workers == 0, or a gpu_share outside [0, 1] or with normalize.
  ImageSource(Dataset dataset, ImageConfig config, std::size_t workers);
  ~ImageSource();
  ImageSource(const ImageSource&) = delete;
  ImageSource& operator=(const ImageSource&) = delete;

  // The output size; with ImageConfig::views, the first view's (see views()).
  Size output() const { return augment_.output(); }
  // uint8 HWC, or float32 CHW with ImageConfig::normalize; with
  // ImageConfig::views, every view's, one after another.
  std::size_t sample_bytes() const;
  // Each view's place in a sample, in order; empty without ImageConfig::views.
  const std::vector<ViewLayout>& views() const { return layout_; }
  const Dataset& dataset() const { return dataset_; }
  // How the workers read the dataset's bytes (shards kept open, config().files).
  const SampleReader& reader() const { return reader_; }
  const Augment& augment() const { return augment_; }
  const ImageConfig& config() const { return config_; }
  // The worker slots it was built for (render_sample's `worker` is below it).
  std::size_t worker_slots() const { return workers_.size(); }
  // The samples left to the GPU path (ImageConfig::gpu_share), shared with the
  // transfer stage; an empty store when gpu_share is 0.
  const std::shared_ptr<DeferredDecodes>& deferred_decodes() const { return deferred_; }

  // Fills one sample (see the policy above). Sets the label from the dataset.
  // Throws, whatever the policy (the pipeline fails), when the pipeline does not
  // match the source: another sample_bytes, more workers than it was built for,
  // or a sample index past the dataset.
  void fill(Sample& s);
  // Read-ahead advice for samples the workers will fill next: for a shard
  // member, WILLNEED on its byte range through the shard descriptor the
  // workers share (opened if the cache has room; advice never closes one a
  // worker uses), so the read is under way while the batch before decodes.
  // A file per sample gets none: advice would cost an open of its own, the
  // very cost shards remove. Errors are left to the sample's own read.
  void prefetch(std::span<const std::uint64_t> indices);
  // fill() as the pipeline's Filler, with prefetch() as its advice where
  // ImageConfig::read_ahead. It may outlive this ImageSource (see Lifetime above).
  Filler filler();

  // Decodes and augments dataset sample `index` into out (sample_bytes(), and
  // float-aligned with ImageConfig::normalize), as the pipeline would with this
  // rng, on worker slot `worker`; threads may call it at once on distinct
  // slots, as the workers do. Throws std::runtime_error "path: reason" on
  // any failure, whatever the policy; std::invalid_argument for a wrong `out`;
  // ReadCancelled when *stopping is set during the read.
  void render_sample(std::size_t index, Rng& rng, std::span<unsigned char> out, std::size_t worker = 0,
                     const std::atomic<bool>* stopping = nullptr);

 private:
  struct Worker;
  class Liveness;
  // render_sample()'s work. With defer_epoch, a sample for the GPU path is put
  // in deferred_ (keyed by that epoch) instead of rendered.
  void process(std::size_t index, Rng& rng, std::span<unsigned char> out, std::size_t worker,
               const std::atomic<bool>* stopping, std::optional<std::uint64_t> defer_epoch);
  // process() with ImageConfig::views, after the file is read and opened.
  void process_views(Worker& w, const ImageInfo& info, Rng& rng, std::span<unsigned char> out);
  // One output from the decoded `view`: g's box rendered, `ops` applied, into
  // out (exactly g.out's uint8 HWC), or through the worker's pixels
  // normalized to float32 CHW with ImageConfig::normalize.
  void draw(Worker& w, const DecodedView& view, const ImageInfo& info, const Geometry& g,
            const std::vector<PixelOp>& ops, std::span<unsigned char> out) const;
  Dataset dataset_;
  ImageConfig config_;
  Augment augment_;                    // ImageConfig::transforms, or the first view's
  std::vector<Augment> view_augments_;  // one per ImageConfig::views entry
  std::vector<ViewLayout> layout_;      // one per view
  SampleReader reader_;  // over dataset_, declared after it
  std::shared_ptr<DeferredDecodes> deferred_ = std::make_shared<DeferredDecodes>();
  std::vector<std::unique_ptr<Worker>> workers_;
  std::shared_ptr<Liveness> live_;  // shared with every Filler handed out
};

}  // namespace conveyor
