// Multi-view samples (ImageConfig::views): each view is what a one-view source
// renders from the Rng where that view's draws start, one decode serves them
// all, and the bytes are the same for any worker count and queue depth;
// normalized on the device, each view is a tensor of its own.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "data/dataset.h"
#include "device/device_pipeline.h"
#include "image/image_source.h"
#include "image_writers.h"
#include "pipeline/pipeline.h"
#include "source/source.h"
#include "temp_dir.h"

using namespace conveyor;
using namespace std::chrono_literals;
namespace t = conveyor::test;

namespace {

// n images of assorted sizes, PNG (lossless: any decode gives the same pixels) or baseline JPEG.
Dataset images(const std::filesystem::path& dir, int n, bool png) {
  std::filesystem::create_directories(dir);
  std::vector<std::filesystem::path> paths;
  std::vector<std::int64_t> labels;
  for (int i = 0; i < n; ++i) {
    const t::Rgb img = t::photo_like(70 + 17 * (i % 4), 50 + 13 * (i % 3), std::uint64_t(i));
    std::string name = std::to_string(i);
    name += png ? ".png" : ".jpg";
    paths.push_back(dir / name);
    t::write_file(paths.back(), png ? t::png(img, t::PngKind::rgb8) : t::jpeg(img));
    labels.push_back(i % 3);
  }
  return Dataset(paths, labels);
}

// DINO's shape, small: 2 global crops and 3 local ones with colour ops of their own.
std::vector<ViewSpec> dino_like() {
  ColorJitter jitter;
  jitter.brightness_min = 0.6;
  jitter.brightness_max = 1.4;
  jitter.saturation_min = 0.8;
  jitter.saturation_max = 1.2;
  RandomResizedCrop global{{32, 32}};
  global.scale_min = 0.4;
  RandomResizedCrop local{{16, 16}};
  local.scale_max = 0.4;
  return {{2, {global, RandomHorizontalFlip{}, jitter}},
          {3, {local, RandomHorizontalFlip{}, RandomGrayscale{0.5}, RandomSolarize{128, 0.5}}}};
}

}  // namespace

TEST_CASE("views: each view is a one-view render from the Rng where its draws start, laid out spec after spec",
          "[views]") {
  t::TempDir dir;
  // PNG (uint8, normalized), then JPEG: one decode at the finest scale any
  // view needs may serve a view better than its own decode would, so JPEG is
  // held to the one-view render within a mean of 1.5 grey levels.
  struct Case {
    bool normalized, jpeg;
  };
  for (const Case k : {Case{false, false}, Case{true, false}, Case{false, true}}) {
    const bool normalized = k.normalized, jpeg = k.jpeg;
    const Dataset d = images(dir.path() / (jpeg ? "jpg" : "png"), 6, !jpeg);
    INFO((normalized ? "normalized" : "uint8") << (jpeg ? " jpeg" : " png"));
    ImageConfig c;
    c.views = dino_like();
    if (normalized) c.normalize = Normalize{};
    ImageSource multi(d, c, 1);
    REQUIRE(multi.views().size() == 5);
    const std::size_t unit = normalized ? sizeof(float) : 1;
    REQUIRE(multi.sample_bytes() == (2 * 32 * 32 * 3 + 3 * 16 * 16 * 3) * unit);
    REQUIRE(multi.views()[1].offset == 32 * 32 * 3 * unit);
    REQUIRE(multi.views()[2].spec == 1);
    REQUIRE(multi.views()[2].copy == 0);
    REQUIRE(multi.views()[4].copy == 2);
    REQUIRE(multi.views()[4].out == Size{16, 16});
    REQUIRE(multi.output() == Size{32, 32});
    // One source per spec: the reference renders.
    std::vector<std::unique_ptr<ImageSource>> one;
    for (const ViewSpec& spec : c.views) {
      ImageConfig oc = c;
      oc.views.clear();
      oc.transforms = spec.transforms;
      one.push_back(std::make_unique<ImageSource>(d, oc, 1));
    }
    for (std::size_t index = 0; index < d.size(); ++index) {
      std::vector<float> storage(multi.sample_bytes() / sizeof(float) + 1);
      std::span<unsigned char> out(reinterpret_cast<unsigned char*>(storage.data()), multi.sample_bytes());
      Rng rng(7, 1, index);
      multi.render_sample(index, rng, out);
      Rng at(7, 1, index);  // advanced through each view's draws, as the multi-view source draws them
      std::vector<PixelOp> ops;
      for (const ViewLayout& v : multi.views()) {
        ImageSource& ref = *one[v.spec];
        std::vector<float> want_storage(v.bytes / sizeof(float) + 1);
        std::span<unsigned char> want(reinterpret_cast<unsigned char*>(want_storage.data()), v.bytes);
        Rng copy = at;
        ref.render_sample(index, copy, want);
        if (!jpeg) {
          REQUIRE(std::memcmp(out.data() + v.offset, want.data(), v.bytes) == 0);
        } else {
          double sum = 0;
          for (std::size_t i = 0; i < v.bytes; ++i) sum += std::abs(int(out[v.offset + i]) - int(want[i]));
          INFO("view " << v.spec << "." << v.copy << " of sample " << index);
          REQUIRE(sum / double(v.bytes) <= 1.5);
        }
        // The next view's draws start where this one's end.
        (void)ref.augment().plan(70 + 17 * int(index % 4), 50 + 13 * int(index % 3), at);
        ref.augment().plan_pixels(at, ops);
      }
      // The views are distinct draws, not one crop repeated.
      REQUIRE(std::memcmp(out.data(), out.data() + multi.views()[1].offset, multi.views()[1].bytes) != 0);
    }
  }
}

TEST_CASE("views: the same bytes for any worker count and queue depth, JPEG and PNG", "[views][pipeline]") {
  t::TempDir dir;
  for (const bool png : {false, true}) {
    INFO((png ? "png" : "jpeg"));
    const Dataset d = images(dir.path() / (png ? "png" : "jpg"), 11, png);
    ImageConfig c;
    c.views = dino_like();
    std::map<std::size_t, std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::byte>>> seen;
    for (const std::size_t workers : {1, 3}) {
      for (const std::size_t depth : {1, 3}) {
        auto task = std::async(std::launch::async, [&] {
          ImageSource src(d, c, workers);
          Config cfg;
          cfg.batch_size = 4;
          cfg.workers = workers;
          cfg.host_queue_depth = depth;
          cfg.sample_bytes = src.sample_bytes();
          cfg.epochs = 2;
          cfg.seed = 3;
          Pipeline p(cfg, d.size(), {src.filler()});
          std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::byte>> bytes;
          while (auto b = p.next()) {
            const Batch& batch = **b;
            for (std::size_t j = 0; j < batch.size(); ++j) {
              const std::byte* at = batch.data + j * cfg.sample_bytes;
              bytes[{batch.epoch, batch.indices[j]}].assign(at, at + cfg.sample_bytes);
            }
          }
          return bytes;
        });
        REQUIRE(task.wait_for(60s) == std::future_status::ready);
        const auto bytes = task.get();
        REQUIRE(bytes.size() == 2 * d.size());
        if (seen.count(workers) == 0) seen[workers] = bytes;
        REQUIRE(bytes == seen[workers]);
      }
    }
    REQUIRE(seen[1] == seen[3]);
  }
}

TEST_CASE("views: normalized on the device, each view a dense tensor, bit for bit the workers' normalize",
          "[views][pipeline][normalize]") {
  t::TempDir dir;
  const Dataset d = images(dir.path(), 9, true);
  ImageConfig c;
  c.views = dino_like();
  Config cfg;
  cfg.batch_size = 4;
  cfg.epochs = 2;
  cfg.seed = 7;
  // The workers' normalize (float32 CHW, each view in turn inside the sample): what each view must be.
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<std::vector<float>>> want;
  {
    ImageConfig cw = c;
    cw.normalize = Normalize{};
    ImageSource src(d, cw, 2);
    Config wc = cfg;
    wc.workers = 2;
    wc.sample_bytes = src.sample_bytes();
    Pipeline p(wc, d.size(), {src.filler()});
    while (auto b = p.next()) {
      const Batch& batch = **b;
      for (std::size_t j = 0; j < batch.size(); ++j) {
        auto& views = want[{batch.epoch, batch.indices[j]}];
        for (const ViewLayout& v : src.views()) {
          const auto* at = reinterpret_cast<const float*>(batch.data + j * wc.sample_bytes + v.offset);
          views.emplace_back(at, at + v.bytes / sizeof(float));
        }
      }
    }
  }
  REQUIRE(want.size() == 2 * d.size());
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  for (const std::size_t workers : {1, 3}) {
    for (const std::size_t depth : {1, 3}) {
      INFO("workers " << workers << " device queue " << depth);
      auto task = std::async(std::launch::async, [&] {
        ImageSource src(d, c, workers);
        Config pc = cfg;
        pc.workers = workers;
        pc.device_queue_depth = depth;
        pc.sample_bytes = src.sample_bytes();
        TransferConfig tc;
        tc.normalize = device_normalization(src, DType::float32);
        DevicePipeline dp(pc, d.size(), src.filler(), tc, open_device(dc));
        std::size_t samples = 0, wrong = 0;
        while (auto b = dp.next()) {
          const Batch& hb = b->host();
          for (std::size_t v = 0; v < src.views().size(); ++v) {
            const std::vector<std::int64_t> shape = b->view_shape(v);
            const Size out = src.views()[v].out;
            if (shape != std::vector<std::int64_t>{std::int64_t(b->size()), 3, out.height, out.width}) ++wrong;
            const std::size_t each = 3 * std::size_t(out.height) * std::size_t(out.width);
            const auto* tensor = static_cast<const float*>(b->view_data(v));
            for (std::size_t j = 0; j < b->size(); ++j) {
              const std::vector<float>& w = want.at({hb.epoch, hb.indices[j]}).at(v);
              if (w.size() != each || std::memcmp(tensor + j * each, w.data(), each * sizeof(float)) != 0) ++wrong;
            }
          }
          samples += b->size();
        }
        return std::pair{samples, wrong};
      });
      REQUIRE(task.wait_for(60s) == std::future_status::ready);
      const auto [samples, wrong] = task.get();
      REQUIRE(samples == 2 * d.size());
      REQUIRE(wrong == 0);
    }
  }
}

TEST_CASE("views: refused with the GPU path, a count of 0, or a batch op, each named", "[views][errors]") {
  t::TempDir dir;
  const Dataset d = images(dir.path(), 2, false);
  ImageConfig c;
  c.views = dino_like();
  c.gpu_share = 0.5;
  REQUIRE_THROWS_WITH(ImageSource(d, c, 1), Catch::Contains("gpu_share is not supported with views"));
  c.gpu_share = 0;
  c.views[1].count = 0;
  REQUIRE_THROWS_WITH(ImageSource(d, c, 1), Catch::Contains("views[1]: count must be at least 1"));
  c.views[1].count = 1;
  c.views[0].transforms.push_back(RandomErasing{});
  REQUIRE_THROWS_WITH(ImageSource(d, c, 1), Catch::Contains("views[0]: RandomErasing is not supported with views"));
}
