// RandomErasing: the rectangle's draw (image/random_erasing.h), the erase
// kernel's host twin (device/kernels/erase.h), and the erase step after
// normalize in a DevicePipeline on the host backend (device/erase_step.h).
// Part of test_device.

#include <cmath>
#include "catch_compat.h"
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <vector>
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/erase_step.h"
#include "device/kernels/erase.h"
#include "image/normalize.h"
#include "image/random_erasing.h"
#include "pipeline/config.h"
#include "support.h"
#include "device_support.h"

using namespace conveyor;
using namespace std::chrono_literals;
using namespace conveyor::test;

TEST_CASE("RandomErasing draws torchvision's rectangles: the coin, then area and log-ratio draws that must fit",
          "[erase]") {
  SECTION("each draw in the order of torchvision's forward and get_params") {
    const RandomErasing e;  // p 0.5, scale (0.02, 0.33), ratio (0.3, 3.3)
    int erased = 0;
    for (std::uint64_t i = 0; i < 500; ++i) {
      Rng rng(3, 0, i), twin(3, 0, i);
      const auto box = draw_erase_box(e, 40, 30, rng);
      // The formula written out: torch.rand(1) < p, then up to 10 tries.
      std::optional<EraseBox> want;
      if (twin.uniform() < e.p) {
        for (int t = 0; t < 10 && !want; ++t) {
          const double area = 40.0 * 30.0 * twin.uniform(0.02, 0.33);
          const double aspect = std::exp(twin.uniform(std::log(0.3), std::log(3.3)));
          const double h = std::nearbyint(std::sqrt(area * aspect)), w = std::nearbyint(std::sqrt(area / aspect));
          if (h < 40 && w < 30) {
            const auto top = std::uint32_t(twin.below(40 - std::uint64_t(h) + 1));
            const auto left = std::uint32_t(twin.below(30 - std::uint64_t(w) + 1));
            want = EraseBox{top, left, std::uint32_t(h), std::uint32_t(w)};
          }
        }
      }
      REQUIRE(box.has_value() == want.has_value());
      if (box) {
        ++erased;
        REQUIRE(box->top == want->top);
        REQUIRE(box->left == want->left);
        REQUIRE(box->height == want->height);
        REQUIRE(box->width == want->width);
      }
    }
    REQUIRE(erased > 200);  // p = 0.5 of 500
    REQUIRE(erased < 300);
  }
  SECTION("every rectangle fits, with its area share and aspect ratio in range up to rounding") {
    RandomErasing e;
    e.p = 1;
    std::size_t drawn = 0;
    for (std::size_t size : {8, 17, 224}) {
      for (std::uint64_t i = 0; i < 2000; ++i) {
        Rng rng(1, size, i);
        const auto box = draw_erase_box(e, size, size + 3, rng);
        if (!box) continue;  // ten draws that did not fit: the image stays as it is
        ++drawn;
        REQUIRE(box->height < size);
        REQUIRE(box->width < size + 3);
        REQUIRE(box->top + box->height <= size);
        REQUIRE(box->left + box->width <= size + 3);
        if (size == 224) {
          const double share = double(box->height) * box->width / (224.0 * 227.0);
          REQUIRE(share >= 0.02 * 0.9);
          REQUIRE(share <= 0.33 * 1.1);
          REQUIRE(double(box->height) / box->width >= 0.3 * 0.9);
          REQUIRE(double(box->height) / box->width <= 3.3 * 1.1);
        }
      }
    }
    REQUIRE(drawn > 5000);
  }
  SECTION("p is the share of samples erased") {
    RandomErasing e;
    e.p = 0.25;
    int erased = 0;
    for (std::uint64_t i = 0; i < 4000; ++i) {
      Rng rng(9, 1, i);
      erased += draw_erase_box(e, 224, 224, rng).has_value();
    }
    REQUIRE(std::abs(erased / 4000.0 - 0.25) < 0.03);
    e.p = 0;
    Rng rng(9, 1, 1);
    REQUIRE(!draw_erase_box(e, 224, 224, rng));
  }
  SECTION("parameters torchvision refuses, named") {
    RandomErasing e;
    e.p = 1.5;
    REQUIRE_THROWS_WITH(e.validate(), Catch::Contains("RandomErasing: p"));
    e = {};
    e.scale = {0.5, 0.2};
    REQUIRE_THROWS_WITH(e.validate(), Catch::Contains("RandomErasing: scale"));
    e.scale = {0.1, 1.5};
    REQUIRE_THROWS_WITH(e.validate(), Catch::Contains("RandomErasing: scale"));
    e = {};
    e.ratio = {0, 1};
    REQUIRE_THROWS_WITH(e.validate(), Catch::Contains("RandomErasing: ratio"));
    REQUIRE_NOTHROW(RandomErasing{}.validate());
  }
}

TEST_CASE("the erase kernel's host twin writes each box's value in every channel and nothing else", "[erase][device]") {
  auto device = host_device();
  auto stream = device->create_stream();
  const std::size_t n = 3, c = 3, h = 5, w = 7, plane = h * w;
  const std::vector<EraseBox> boxes{{1, 2, 3, 4}, {0, 0, 0, 0}, {4, 6, 1, 1}};
  for (DType type : {DType::float32, DType::float16, DType::bfloat16, DType::uint8}) {
    DYNAMIC_SECTION("dtype " << dtype_name(type)) {
      const std::size_t size = dtype_size(type);
      std::vector<unsigned char> data(n * c * plane * size, 0x5A);
      EraseJob job;
      job.data = data.data();
      job.boxes = boxes.data();
      job.samples = n;
      job.channels = c;
      job.height = h;
      job.width = w;
      job.type = type;
      job.value[0] = 0.f;
      job.value[1] = -1.5f;
      job.value[2] = 2.25f;
      kernels::erase(*device, job, *stream);
      device->synchronize(*stream);
      for (std::size_t s = 0; s < n; ++s) {
        const EraseBox b = boxes[s];
        for (std::size_t ch = 0; ch < c; ++ch) {
          const std::uint32_t bits = erase_element_bits(type, job.value[ch]);
          for (std::size_t y = 0; y < h; ++y) {
            for (std::size_t x = 0; x < w; ++x) {
              const bool inside = y >= b.top && y < b.top + b.height && x >= b.left && x < b.left + b.width;
              std::uint32_t got = 0;
              std::memcpy(&got, &data[((s * c + ch) * plane + y * w + x) * size], size);
              const std::uint32_t untouched = size == 4 ? 0x5A5A5A5Au : size == 2 ? 0x5A5Au : 0x5Au;
              REQUIRE(got == (inside ? bits : untouched));
            }
          }
        }
      }
    }
  }
  REQUIRE(erase_element_bits(DType::float32, 2.25f) == float_bits(2.25f));
  REQUIRE(erase_element_bits(DType::float16, -1.5f) == 0xBE00u);
  REQUIRE(erase_element_bits(DType::bfloat16, 2.25f) == 0x4010u);
  REQUIRE(erase_element_bits(DType::uint8, 300.f) == 255u);
  REQUIRE(erase_element_bits(DType::uint8, -3.f) == 0u);
}

TEST_CASE("the erase step after normalize: each sample's rectangle from (seed, epoch, index), the same bytes for any "
          "workers, the rest as normalized",
          "[erase][device][pipeline]") {
  const std::size_t height = 4, width = 6, channels = 3, dataset = 23;
  RandomErasing erasing;
  erasing.p = 0.6;
  erasing.value = {0.f, 0.5f, -0.25f};
  std::map<std::size_t, std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<float>>> by_workers;
  for (std::size_t workers : {1, 3}) {
    for (std::size_t depth : {1, 2}) {
      {  // not a section: the runs are compared with each other below
        INFO("workers " << workers << " depth " << depth);
        DeviceConfig dc;
        dc.max_delay_us = 30;
        dc.delay_seed = workers * 10 + depth;
        auto device = host_device(dc);
        Config cfg = small_config(workers, depth, 2);
        cfg.sample_bytes = height * width * channels;
        TransferConfig tc;
        tc.normalize = TransferConfig::Normalization{height, width, channels, Normalize{}, DType::float32};
        tc.batch_steps.push_back(Erase{erasing});
        auto task = std::async(std::launch::async, [&] {
          DevicePipeline dp(cfg, dataset, test::fill_pattern, tc, device);
          std::size_t erased = 0, wrong = 0;
          while (auto b = dp.next()) {
            const Batch& hb = b->host();
            const auto* out = static_cast<const float*>(b->data());
            for (std::size_t j = 0; j < b->size(); ++j) {
              Rng rng(cfg.seed ^ kEraseSeedSalt, hb.epoch, hb.indices[j]);
              const EraseBox box = draw_erase_box(erasing, height, width, rng).value_or(EraseBox{});
              erased += box.height * box.width > 0;
              std::vector<std::byte> px(cfg.sample_bytes);
              test::expected_bytes(cfg.seed, hb.epoch, hb.indices[j], px);
              std::vector<float> sample(out + j * cfg.sample_bytes, out + (j + 1) * cfg.sample_bytes);
              for (std::size_t c = 0; c < channels; ++c) {
                const auto a = channel_affine(Normalize{}.mean[c], Normalize{}.std[c]);
                for (std::size_t y = 0; y < height; ++y) {
                  for (std::size_t x = 0; x < width; ++x) {
                    const bool inside = y >= box.top && y < box.top + box.height && x >= box.left &&
                                        x < box.left + box.width;
                    const float want = inside ? erasing.value[c]
                                              : normalize_value(std::uint8_t(px[(y * width + x) * channels + c]), a);
                    if (sample[(c * height + y) * width + x] != want) ++wrong;
                  }
                }
              }
              by_workers[workers][{hb.epoch, hb.indices[j]}] = std::move(sample);
            }
          }
          REQUIRE(wrong == 0);
          REQUIRE(erased > 5);   // p = 0.6 of 46 samples
          REQUIRE(erased < 41);
        });
        REQUIRE(task.wait_for(60s) == std::future_status::ready);
        task.get();
      }
    }
  }
  REQUIRE(by_workers[1].size() == 2 * dataset);
  REQUIRE(by_workers[1] == by_workers[3]);  // the same bytes for 1 and 3 workers
}

TEST_CASE("the erase step needs normalize on the device and valid parameters, and says which", "[erase][device]") {
  auto device = host_device();
  Config cfg = small_config(1, 1, 2);
  TransferConfig tc;
  tc.batch_steps.push_back(Erase{});
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 8, test::fill_pattern, tc, device), Catch::Contains("RandomErasing needs normalize on the device"));
  cfg.sample_bytes = 4 * 4 * 3;
  tc.normalize = TransferConfig::Normalization{4, 4, 3, Normalize{}, DType::float16};
  RandomErasing bad;
  bad.p = -1;
  tc.batch_steps = {Erase{bad}};
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 8, test::fill_pattern, tc, device), Catch::Contains("RandomErasing: p"));
}
