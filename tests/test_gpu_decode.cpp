// The GPU decode path through the transfer stage, on the host
// backend, whose decoder is the host twin: the split by (index, share) gives
// the same bytes for any worker count, every sample arrives exactly once, the
// GPU-path samples are the twin's bits and the rest the CPU path's, and a file
// the decoder refuses follows the error policy with its name.
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"

#include "device/device_pipeline.h"
#include "gpu_decode/share.h"
#include "gpu_decode/step.h"
#include "image_writers.h"
#include "image/gpu_decode_plan.h"
#include "image/image_source.h"
#include "temp_dir.h"

using namespace conveyor;
namespace t = conveyor::test;

namespace {

constexpr int kOut = 24;

// 30 files: JPEGs the GPU path takes (colour 4:2:0 and 4:4:4, gray) and ones it
// leaves to the CPU (progressive, arithmetic, CMYK, BMP), of varied sizes.
Dataset make_files(t::TempDir& dir, std::vector<bool>& decodable) {
  std::vector<std::filesystem::path> paths;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 30; ++i) {
    const t::Rgb img = t::photo_like(40 + 7 * (i % 6), 30 + 5 * (i % 4), std::uint64_t(i));
    std::vector<unsigned char> bytes;
    bool gpu = true;
    switch (i % 10) {
      case 3: bytes = t::jpeg(img, {t::JpegKind::progressive, 90}), gpu = false; break;
      case 5: bytes = t::jpeg(img, {t::JpegKind::gray, 90}); break;
      case 6: bytes = t::jpeg(img, {t::JpegKind::baseline, 90, false}); break;
      case 7: bytes = t::jpeg(img, {t::JpegKind::cmyk_adobe, 90}), gpu = false; break;
      case 8: bytes = t::bmp(img), gpu = false; break;
      case 9: bytes = t::jpeg(img, {t::JpegKind::arithmetic, 90}), gpu = false; break;
      default: bytes = t::jpeg(img, {t::JpegKind::baseline, 85});
    }
    paths.push_back(dir.write("f" + std::to_string(i) + (i % 10 == 8 ? ".bmp" : ".jpg"), bytes));
    labels.push_back(i % 4);
    decodable.push_back(gpu);
  }
  return Dataset(paths, labels);
}

// What every test here renders: RandomResizedCrop to kOut, then a flip.
ImageConfig rrc_flip() {
  ImageConfig ic;
  ic.transforms = {RandomResizedCrop{{kOut, kOut}}, RandomHorizontalFlip{}};
  return ic;
}

// The host backend, as open_device gives it by default (no simulated delays).
std::shared_ptr<Device> host_device() {
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  return open_device(dc);
}

struct Run {
  std::vector<std::uint64_t> digests;              // per batch, in delivery order
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<unsigned char>> sample;  // (epoch, index) -> bytes
  std::vector<SkippedSample> skipped;
  GpuDecodeCounts counts;
};

// The host twin, refusing every other item it is given (every one with
// every = 1), after decoding them all, so its images sit by position as a real
// decoder's do: the transfer stage must send those to the CPU and render the
// rest from their own images.
class RefusingDecoder final : public JpegBatchDecoder {
 public:
  explicit RefusingDecoder(std::unique_ptr<JpegBatchDecoder> inner, std::size_t every = 2)
      : inner_(std::move(inner)), every_(every) {}
  std::string describe() const override { return "refusing " + inner_->describe(); }
  std::vector<std::string> decode(std::span<const JpegItem> items, Stream& stream) override {
    std::vector<std::string> refused = inner_->decode(items, stream);
    for (std::size_t i = every_ - 1; i < refused.size(); i += every_) refused[i] = "refused for the test";
    return refused;
  }
  void render(std::span<const JpegItem> items, const std::vector<std::string>& refused, Stream& stream) override {
    inner_->render(items, refused, stream);
  }

 private:
  std::unique_ptr<JpegBatchDecoder> inner_;
  std::size_t every_;
};

// Two epochs, batch 4, through the host backend with random delays; with
// share < 0 no GPU decode is configured at all. `decoders`: the feed's (one
// thread per two).
Run run(const Dataset& d, double share, std::size_t workers, ErrorPolicy on_error = ErrorPolicy::fail,
        bool refuse_some = false, HostTransfer transfer = HostTransfer::copy, std::size_t decoders = 2) {
  ImageConfig ic = rrc_flip();
  ic.on_error = on_error;
  ic.gpu_share = std::max(share, 0.0);
  ImageSource src(d, ic, workers);
  Config c;
  c.batch_size = 4;
  c.workers = workers;
  c.sample_bytes = src.sample_bytes();
  c.epochs = 2;
  c.seed = 3;
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  dc.max_delay_us = 30;
  dc.host_transfer = transfer;
  auto device = open_device(dc);
  TransferConfig tc;
  if (share >= 0) {
    std::string why;
    std::vector<std::shared_ptr<JpegBatchDecoder>> list;
    for (std::size_t k = 0; k < decoders; ++k) {
      std::shared_ptr<JpegBatchDecoder> decoder = create_jpeg_decoder(*device, DecodeLimits{}, why);
      REQUIRE(decoder);
      if (refuse_some) decoder = std::make_shared<RefusingDecoder>(create_jpeg_decoder(*device, DecodeLimits{}, why));
      list.push_back(std::move(decoder));
    }
    tc.batch_steps = {GpuDecode{src.deferred_decodes(), list, on_error}};
  }
  DevicePipeline p(c, d.size(), src.filler(), tc, device);
  Run r;
  while (auto b = p.next()) {
    const Batch& h = b->host();
    std::uint64_t digest = 1469598103934665603ULL;
    const auto* px = static_cast<const unsigned char*>(b->data());
    for (std::size_t j = 0; j < b->size(); ++j) {
      std::vector<unsigned char> bytes(px + j * c.sample_bytes, px + (j + 1) * c.sample_bytes);
      for (unsigned char v : bytes) digest = (digest ^ v) * 1099511628211ULL;
      digest = (digest ^ h.indices[j]) * 1099511628211ULL;
      REQUIRE(r.sample.emplace(std::pair{h.epoch, h.indices[j]}, std::move(bytes)).second);  // exactly once
    }
    r.digests.push_back(digest);
  }
  r.skipped = p.skipped();
  r.counts = gpu_decode_counts(p);
  REQUIRE(src.deferred_decodes()->pending() == 0);  // every deferred sample was taken
  return r;
}

}  // namespace

TEST_CASE("gpu decode: the same bytes for any worker count, each sample once, split by index and share",
          "[gpu-decode][pipeline]") {
  t::TempDir dir;
  std::vector<bool> decodable;
  const Dataset d = make_files(dir, decodable);
  const Run cpu = run(d, -1, 2);
  REQUIRE(cpu.sample.size() == 60);
  REQUIRE(run(d, 0, 3).digests == cpu.digests);  // share 0: the CPU path exactly
  std::size_t gpu_candidates = 0;
  for (bool b : decodable) gpu_candidates += b;

  for (const double share : {0.4, 1.0}) {
    CAPTURE(share);
    const Run one = run(d, share, 1);
    const Run four = run(d, share, 4);
    REQUIRE(one.digests == four.digests);
    // The feed's decoders and threads change nothing either: one decoder (the
    // delivery thread finishes each batch first), or five on three threads.
    REQUIRE(run(d, share, 3, ErrorPolicy::fail, false, HostTransfer::copy, 1).digests == one.digests);
    REQUIRE(run(d, share, 2, ErrorPolicy::fail, false, HostTransfer::copy, 5).digests == one.digests);
    REQUIRE(one.sample.size() == 60);
    REQUIRE(one.counts.cpu_fallbacks == 0);
    std::size_t expect = 0;
    for (std::size_t i = 0; i < d.size(); ++i) expect += decodable[i] && gpu_decodes(i, share);
    REQUIRE(one.counts.decoded == 2 * expect);  // two epochs
    REQUIRE(four.counts.decoded == 2 * expect);
    if (share == 1.0) REQUIRE(expect == gpu_candidates);

    // Each sample: the twin's bits on the GPU path, the CPU path's otherwise.
    const Augment augment({RandomResizedCrop{{kOut, kOut}}, RandomHorizontalFlip{}});
    ImageDecoder dec({}, {8});
    for (const auto& [key, bytes] : one.sample) {
      const auto [epoch, index] = key;
      CAPTURE(epoch, index);
      if (!(decodable[index] && gpu_decodes(index, share))) {
        REQUIRE(bytes == cpu.sample.at(key));
        continue;
      }
      std::vector<unsigned char> file;
      read_file(d.path(index), 1 << 20, file);
      const ImageInfo info = dec.open(file);
      Rng rng(3, epoch, index);
      const Geometry g = augment.plan(info.width, info.height, rng);
      const DecodedView v = dec.decode({0, 0, info.width, info.height}, 1.0);
      std::vector<unsigned char> want(std::size_t(kOut) * kOut * 3);
      render_gpu_twin(v.pixels, v.width, v.height, v.stride, g, want);
      REQUIRE(bytes == want);  // the counts above say this path ran: since the resize reads only
                               // its window, the CPU path's full-scale ROI decode gives these bits too
    }
  }
}

TEST_CASE("gpu decode: a file the decoders refuse is named, and counted when skipping", "[gpu-decode][errors]") {
  t::TempDir dir;
  const auto good = t::jpeg(t::photo_like(240, 180, 1), {t::JpegKind::baseline, 90});
  std::vector<std::filesystem::path> paths;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 9; ++i) {
    const bool bad = i == 4;  // the header is whole, the image data is cut: only a full decode finds out
    paths.push_back(dir.write("g" + std::to_string(i) + ".jpg", bad ? t::truncated(good, good.size() * 2 / 3) : good));
    labels.push_back(i);
  }
  const Dataset d(paths, labels);
  REQUIRE_THROWS_WITH(run(d, 1.0, 2), Catch::Contains("g4.jpg: ") && Catch::Contains("(the GPU decoder: "));
  const Run r = run(d, 1.0, 2, ErrorPolicy::skip);
  REQUIRE(r.sample.size() == 16);  // 8 good samples, two epochs
  REQUIRE(r.skipped.size() == 1);  // listed once, skipped in both epochs
  for (const auto& s : r.skipped) {
    REQUIRE((s.times == 2 && s.epoch == 0 && s.last_epoch == 1));
    REQUIRE(s.index == 4);
    REQUIRE(s.reason.find("g4.jpg: ") != std::string::npos);
    REQUIRE(s.reason.find("(the GPU decoder: ") != std::string::npos);
  }
  REQUIRE(r.counts.decoded == 16);
}

TEST_CASE("gpu decode: a share outside [0, 1], or with the workers normalizing, is refused", "[gpu-decode][config]") {
  t::TempDir dir;
  const Dataset d({dir.write("a.jpg", t::jpeg(t::photo_like(16, 16, 2)))}, {0});
  ImageConfig ic;
  ic.gpu_share = 1.5;
  REQUIRE_THROWS_WITH(ImageSource(d, ic, 1), Catch::Contains("gpu_share 1.5"));
  ic.gpu_share = 0.5;
  ic.normalize = Normalize{};
  REQUIRE_THROWS_WITH(ImageSource(d, ic, 1), Catch::Contains("gpu_share needs the device to normalize"));
}

TEST_CASE("gpu decode: auto's share balances the rates measured on each side", "[gpu-decode][auto]") {
  REQUIRE(balanced_gpu_share(100, 4, 400) == Approx(0.5));
  REQUIRE(balanced_gpu_share(100, 4, 0) == 0);
  REQUIRE(balanced_gpu_share(0, 4, 10) == 1);
  t::TempDir dir;
  std::vector<bool> decodable;
  const Dataset d = make_files(dir, decodable);
  std::size_t candidates = 0;
  for (bool b : decodable) candidates += b;
  const ImageConfig ic = rrc_flip();
  ImageSource src(d, ic, 3);  // the CPU side measured on 3 worker slots at once
  auto device = host_device();
  std::string why;
  const std::vector<std::shared_ptr<JpegBatchDecoder>> decoders{create_jpeg_decoder(*device, DecodeLimits{}, why),
                                                                 create_jpeg_decoder(*device, DecodeLimits{}, why)};
  const GpuShare m = measure_gpu_share(src, decoders, *device, 3);
  REQUIRE(m.samples == candidates);  // the dataset is smaller than 4 x 64: every decodable file
  REQUIRE(m.cpu_per_worker > 0);
  REQUIRE(m.gpu > 0);
  REQUIRE(m.share == Approx(balanced_gpu_share(m.cpu_per_worker, 3, m.gpu)));
  REQUIRE(m.share > 0);
  REQUIRE(m.share < 1);
  REQUIRE(m.describe(3).find(" per worker x 3, GPU ") != std::string::npos);

  const Dataset bmps({dir.write("p.bmp", t::bmp(t::photo_like(20, 20, 1)))}, {0});
  ImageSource none(bmps, ic, 1);
  const GpuShare z = measure_gpu_share(none, decoders, *device, 3);
  REQUIRE(z.samples == 0);
  REQUIRE(z.share == 0);
}

TEST_CASE("gpu decode: auto's samples are spread over the dataset, not its first files", "[gpu-decode][auto]") {
  // 300 files, only the last 40 JPEGs: 8 samples among 32 candidates evenly
  // spaced over the 300 find some; the first 32 files alone would hold none.
  t::TempDir dir;
  std::vector<std::filesystem::path> paths;
  for (int i = 0; i < 300; ++i) {
    const t::Rgb img = t::photo_like(24, 20, std::uint64_t(i));
    paths.push_back(i < 260 ? dir.write("f" + std::to_string(i) + ".bmp", t::bmp(img))
                            : dir.write("f" + std::to_string(i) + ".jpg", t::jpeg(img, {t::JpegKind::baseline, 85})));
  }
  const Dataset d(paths, std::vector<std::int64_t>(paths.size(), 0));
  ImageSource src(d, rrc_flip(), 1);
  auto device = host_device();
  std::string why;
  const std::vector<std::shared_ptr<JpegBatchDecoder>> decoders{create_jpeg_decoder(*device, DecodeLimits{}, why)};
  const GpuShare m = measure_gpu_share(src, decoders, *device, 1, 8);
  REQUIRE(m.samples > 0);
  REQUIRE(m.samples <= 8);
  REQUIRE(m.gpu > 0);
}

TEST_CASE("gpu decode: auto rethrows a decoder's error from its threads", "[gpu-decode][auto][errors]") {
  struct Failing final : JpegBatchDecoder {
    std::string describe() const override { return "failing"; }
    std::vector<std::string> decode(std::span<const JpegItem>, Stream&) override {
      throw DeviceError("the device was lost");
    }
    void render(std::span<const JpegItem>, const std::vector<std::string>&, Stream&) override {}
  };
  t::TempDir dir;
  std::vector<bool> decodable;
  const Dataset d = make_files(dir, decodable);
  ImageSource src(d, rrc_flip(), 2);
  auto device = host_device();
  const std::vector<std::shared_ptr<JpegBatchDecoder>> decoders{std::make_shared<Failing>(), std::make_shared<Failing>()};
  REQUIRE_THROWS_WITH(measure_gpu_share(src, decoders, *device, 2), Catch::Contains("the device was lost"));
}

TEST_CASE("gpu decode: auto counts only the samples the decoder takes, and taking none is share 0", "[gpu-decode][auto]") {
  t::TempDir dir;
  std::vector<bool> decodable;
  const Dataset d = make_files(dir, decodable);
  ImageSource src(d, rrc_flip(), 1);
  auto device = host_device();
  std::string why;
  const std::vector<std::shared_ptr<JpegBatchDecoder>> none{
      std::make_shared<RefusingDecoder>(create_jpeg_decoder(*device, DecodeLimits{}, why), 1)};
  const GpuShare m = measure_gpu_share(src, none, *device, 3);
  REQUIRE(m.samples > 0);  // it measured them, and took none: they would all go to the CPU
  REQUIRE(m.gpu == 0);
  REQUIRE(m.share == 0);
}

TEST_CASE("gpu decode: the line hints at leaving the transfer thread a core when the workers take them all",
          "[gpu-decode][auto]") {
  REQUIRE(gpu_decode_core_hint(16, 16).find("--workers 14 ") != std::string::npos);
  REQUIRE(gpu_decode_core_hint(15, 16).find("--workers 14 ") != std::string::npos);
  REQUIRE(gpu_decode_core_hint(14, 16).empty());
  REQUIRE(gpu_decode_core_hint(32, 16).find("(16 here") != std::string::npos);
  REQUIRE(gpu_decode_core_hint(2, 2).empty());  // too few cores for a hint to help
  REQUIRE(gpu_decode_core_hint(4, 4).find("--workers 2 ") != std::string::npos);
}

TEST_CASE("gpu decode: samples the decoder refuses go to the CPU, the rest render from their own images",
          "[gpu-decode][errors]") {
  t::TempDir dir;
  std::vector<bool> decodable;
  const Dataset d = make_files(dir, decodable);  // every file different
  const Run plain = run(d, 1.0, 2);
  const Run refusing = run(d, 1.0, 2, ErrorPolicy::fail, true);
  REQUIRE(refusing.sample == plain.sample);  // the CPU fall-back is the twin's arithmetic: the same bits
  REQUIRE(refusing.counts.cpu_fallbacks > 0);
  REQUIRE(refusing.counts.decoded > 0);
  REQUIRE(refusing.counts.decoded + refusing.counts.cpu_fallbacks == plain.counts.decoded);  // each counted once
  // Handed over to a CPU consumer (no copy), the GPU path writes the host buffer itself.
  REQUIRE(run(d, 1.0, 3, ErrorPolicy::fail, true, HostTransfer::handover).sample == plain.sample);
}

TEST_CASE("gpu decode: a source that would defer with no pipeline to decode stops, saying so", "[gpu-decode][config]") {
  t::TempDir dir;
  const Dataset d({dir.write("a.jpg", t::jpeg(t::photo_like(32, 32, 2)))}, {0});
  ImageConfig ic;
  ic.transforms = {RandomResizedCrop{{8, 8}}};
  ic.gpu_share = 1;
  ImageSource src(d, ic, 1);
  Config c;
  c.batch_size = 1;
  c.workers = 1;
  c.sample_bytes = src.sample_bytes();
  Pipeline p(c, d.size(), {src.filler()});  // a plain pipeline: nothing takes the deferred samples
  REQUIRE_THROWS_WITH(p.next(), Catch::Contains("gpu_share is set but no pipeline decodes for it"));
}

namespace {
// The host twin, taking `ms` milliseconds longer for each batch it decodes:
// a GPU decoder that cannot keep up.
class SlowDecoder final : public JpegBatchDecoder {
 public:
  SlowDecoder(std::unique_ptr<JpegBatchDecoder> inner, int ms) : inner_(std::move(inner)), ms_(ms) {}
  std::string describe() const override { return "slow " + inner_->describe(); }
  std::vector<std::string> decode(std::span<const JpegItem> items, Stream& stream) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return inner_->decode(items, stream);
  }
  void render(std::span<const JpegItem> items, const std::vector<std::string>& refused, Stream& stream) override {
    inner_->render(items, refused, stream);
  }
  DecodeTimes times() const override { return inner_->times(); }  // the sleep is no part of the twin's

 private:
  std::unique_ptr<JpegBatchDecoder> inner_;
  int ms_;
};
}  // namespace

TEST_CASE("gpu decode feed: its threads are a stage, named the bottleneck when the decoder is slow, a stop mid-run ends",
          "[gpu-decode][feed]") {
  t::TempDir dir;
  std::vector<std::filesystem::path> paths;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 24; ++i) {
    paths.push_back(dir.write("s" + std::to_string(i) + ".jpg", t::jpeg(t::photo_like(32, 24, std::uint64_t(i)))));
    labels.push_back(i % 3);
  }
  const Dataset d(paths, labels);
  ImageConfig ic = rrc_flip();
  ic.gpu_share = 1.0;
  for (const std::size_t decoders : {std::size_t(1), std::size_t(2), std::size_t(4)}) {
    CAPTURE(decoders);
    ImageSource src(d, ic, 2);
    Config c;
    c.batch_size = 4;
    c.workers = 2;
    c.sample_bytes = src.sample_bytes();
    c.epochs = 2;
    DeviceConfig dc;
    dc.backend = BackendChoice::host;
    dc.max_delay_us = 200;
    auto device = open_device(dc);
    TransferConfig tc;
    std::string why;
    std::vector<std::shared_ptr<JpegBatchDecoder>> list;
    for (std::size_t k = 0; k < decoders; ++k) {
      list.push_back(std::make_shared<SlowDecoder>(create_jpeg_decoder(*device, DecodeLimits{}, why), 20));
    }
    tc.batch_steps = {GpuDecode{src.deferred_decodes(), list, ErrorPolicy::fail, {}, 1}};
    {
      DevicePipeline p(c, d.size(), src.filler(), tc, device);
      std::size_t samples = 0;
      while (auto b = p.next()) samples += b->size();
      REQUIRE(samples == 48);
      const PipelineStats s = p.stats();
      REQUIRE(s.stages.size() == 4);
      REQUIRE(s.stages[1].name == "gpu decode");
      REQUIRE(s.stages[1].threads == 1);
      REQUIRE(s.stages[1].items == 48);  // samples decoded
      REQUIRE(s.stages[1].busy_fraction() > 0.5);
      REQUIRE(s.bottleneck()->name == "gpu decode");
      REQUIRE(s.bottleneck_summary().find("the GPU decode feed limits") != std::string::npos);
      REQUIRE(gpu_decode_counts(p).decoded == 48);
      // Its busy time broken down by the decoders' own clocks: every batch's
      // decode() counted once (2 epochs of 6 batches of 4), the twin's parse
      // and decode timed, and the parts within the busy time.
      const auto& parts = s.stages[1].parts;
      REQUIRE(parts.size() == 4);
      REQUIRE(parts[0].name == "parse");
      REQUIRE(parts[2].name == "decode");
      REQUIRE(parts[2].calls == 12);
      REQUIRE(parts[1].calls == 0);  // the twin has no setup
      REQUIRE(parts[0].seconds > 0);
      REQUIRE(parts[2].seconds > 0);
      REQUIRE(parts[0].seconds + parts[2].seconds < s.stages[1].busy_s);  // the sleeps are busy time too
      REQUIRE(s.table().find("gpu decode parts: parse ") != std::string::npos);
      REQUIRE(s.since(s).stages[1].parts[2].calls == 0);
    }
    // Stopped after two batches, with the feed decoding ahead: stop() returns and the pipeline goes.
    DevicePipeline p(c, d.size(), src.filler(), tc, device);
    REQUIRE(p.next());
    REQUIRE(p.next());
    p.stop();
    REQUIRE_FALSE(p.next());
  }
}
