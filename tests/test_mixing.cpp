// MixUp and CutMix: the batch's draw (image/mixing.h) against torchvision v2's
// formulas, the mix kernel's host twin (device/kernels/mix.h) element by
// element, and the Mix step after normalize in a DevicePipeline on the host
// backend (device/mix_step.h). Part of test_device.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <map>
#include <vector>

#include "catch_compat.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/erase_step.h"
#include "device/kernels/mix.h"
#include "device/mix_step.h"
#include "image/augment.h"
#include "image/mixing.h"
#include "image/normalize.h"
#include "image/transform_spec.h"
#include "pipeline/config.h"
#include "support.h"
#include "device_support.h"

using namespace conveyor;
using namespace std::chrono_literals;
using namespace conveyor::test;

namespace {

BatchMixing mixup_only(double alpha) {
  BatchMixing m;
  m.mixup = MixUp{alpha};
  m.num_classes = 10;
  return m;
}
BatchMixing cutmix_only(double alpha) {
  BatchMixing m;
  m.cutmix = CutMix{alpha};
  m.num_classes = 10;
  return m;
}

}  // namespace

TEST_CASE("Beta(a, a) draws have the Beta's mean and variance, and follow from the Rng alone", "[mix]") {
  for (const double a : {0.2, 1.0, 2.5}) {
    INFO("alpha " << a);
    const int n = 40000;
    double sum = 0, squares = 0;
    for (int i = 0; i < n; ++i) {
      Rng rng(7, 1, std::uint64_t(i)), again(7, 1, std::uint64_t(i));
      const double x = sample_beta(a, rng);
      REQUIRE(x == sample_beta(a, again));
      REQUIRE(x >= 0.0);
      REQUIRE(x <= 1.0);
      sum += x;
      squares += x * x;
    }
    const double mean = sum / n, variance = squares / n - mean * mean;
    const double want_variance = 1.0 / (4.0 * (2.0 * a + 1.0));  // a^2 / ((2a)^2 (2a + 1))
    // Standard errors: sqrt(var / n) for the mean, about var * sqrt(2 / n) for the variance.
    REQUIRE(std::abs(mean - 0.5) < 5 * std::sqrt(want_variance / n));
    REQUIRE(std::abs(variance - want_variance) < 0.05 * want_variance);
  }
  // alpha 0.2 puts most of the mass near 0 and 1: both tails are reached.
  int low = 0, high = 0;
  for (int i = 0; i < 2000; ++i) {
    Rng rng(1, 0, std::uint64_t(i));
    const double x = sample_beta(0.2, rng);
    low += x < 0.01;
    high += x > 0.99;
  }
  REQUIRE(low > 300);
  REQUIRE(high > 300);
}

TEST_CASE("the batch draw follows torchvision's MixUp and CutMix, draw by draw", "[mix]") {
  SECTION("MixUp: lambda alone; the box is the whole image") {
    for (std::uint64_t i = 0; i < 200; ++i) {
      Rng rng(5, 2, i), twin(5, 2, i);
      const MixDraw d = draw_mix(mixup_only(0.2), 30, 40, rng);
      REQUIRE_FALSE(d.cutmix);
      REQUIRE(d.lambda == sample_beta(0.2, twin));
      REQUIRE((d.x1 == 0 && d.y1 == 0 && d.x2 == 40 && d.y2 == 30));
    }
  }
  SECTION("CutMix: lambda, r_x = randint(W), r_y = randint(H), half-sides int(0.5 sqrt(1 - lambda) side), "
          "clamped; lambda becomes 1 - box area / image area") {
    std::size_t empty = 0, clipped = 0;
    for (std::uint64_t i = 0; i < 2000; ++i) {
      const std::size_t h = 17 + i % 13, w = 9 + i % 31;
      Rng rng(5, 3, i), twin(5, 3, i);
      const MixDraw d = draw_mix(cutmix_only(1.0), h, w, rng);
      REQUIRE(d.cutmix);
      // The formula written out (torchvision/transforms/v2/_augment.py, CutMix._get_params).
      const double lam = sample_beta(1.0, twin);
      const auto r_x = std::int64_t(twin.below(w)), r_y = std::int64_t(twin.below(h));
      const double r = 0.5 * std::sqrt(1.0 - lam);
      const auto rw = std::int64_t(r * double(w)), rh = std::int64_t(r * double(h));
      const std::int64_t x1 = std::max<std::int64_t>(r_x - rw, 0), y1 = std::max<std::int64_t>(r_y - rh, 0);
      const std::int64_t x2 = std::min<std::int64_t>(r_x + rw, std::int64_t(w));
      const std::int64_t y2 = std::min<std::int64_t>(r_y + rh, std::int64_t(h));
      REQUIRE(d.x1 == x1);
      REQUIRE(d.y1 == y1);
      REQUIRE(d.x2 == x2);
      REQUIRE(d.y2 == y2);
      REQUIRE(d.lambda == 1.0 - double((x2 - x1) * (y2 - y1)) / double(w * h));
      empty += (x2 - x1) * (y2 - y1) == 0;
      clipped += x1 == 0 || y1 == 0 || x2 == std::int64_t(w) || y2 == std::int64_t(h);
    }
    REQUIRE(empty > 0);    // lambda near 1 leaves a box of no area
    REQUIRE(clipped > 0);  // and boxes reach the edges
  }
  SECTION("both: a coin first, each op about half the batches") {
    BatchMixing m = mixup_only(0.2);
    m.cutmix = CutMix{1.0};
    std::size_t cut = 0;
    for (std::uint64_t i = 0; i < 2000; ++i) {
      Rng rng(9, 0, i), twin(9, 0, i);
      const MixDraw d = draw_mix(m, 20, 20, rng);
      REQUIRE(d.cutmix == !(twin.uniform() >= 0.5));
      cut += d.cutmix;
    }
    REQUIRE(cut > 900);
    REQUIRE(cut < 1100);
  }
}

TEST_CASE("the mix parameters are checked as the transform list is", "[mix]") {
  REQUIRE_THROWS_WITH(Augment(parse_transforms("rrc(8), mixup(0)")), Catch::Contains("MixUp: alpha must be"));
  REQUIRE_THROWS_WITH(Augment(parse_transforms("rrc(8), cutmix(alpha=-1)")), Catch::Contains("CutMix: alpha must be"));
  REQUIRE_THROWS_WITH(Augment(parse_transforms("rrc(8), mixup, flip")), Catch::Contains("after MixUp or CutMix"));
  REQUIRE_THROWS_WITH(Augment(parse_transforms("rrc(8), mixup, mixup(0.2)")), Catch::Contains("MixUp: given twice"));
  REQUIRE_THROWS_WITH(Augment(parse_transforms("rrc(8), mixup(num_classes=10), cutmix(num_classes=12)")),
                      Catch::Contains("CutMix: num_classes=12 differs from MixUp's 10"));
  REQUIRE_THROWS_WITH(Augment(parse_transforms("rrc(8), cutmix, erase")), Catch::Contains("after MixUp or CutMix"));
  REQUIRE_THROWS_WITH(parse_transforms("rrc(8), mixup(labels_getter=1)"), Catch::Contains("labels_getter"));
  const Augment a(parse_transforms("rrc(8), flip, erase(0.25), mixup(0.2), cutmix(1.0, num_classes=100)"));
  REQUIRE(a.erasing());
  REQUIRE(a.mixing());
  REQUIRE(a.mixing()->mixup->alpha == 0.2);
  REQUIRE(a.mixing()->cutmix->alpha == 1.0);
  REQUIRE(a.mixing()->stated_classes() == 100);
  REQUIRE_THAT(a.describe(), Catch::Contains("MixUp(alpha=0.2; per batch"));
  REQUIRE_FALSE(Augment(parse_transforms("rrc(8)")).mixing());
}

TEST_CASE("float16 and bfloat16 bits read back exactly", "[mix]") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const int exponent = int(h >> 10) & 31, mantissa = int(h & 1023);
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    const float got = half_bits_to_float(std::uint16_t(h));
    if (exponent == 31) {
      REQUIRE((mantissa ? std::isnan(got) : std::isinf(got)));
      continue;
    }
    const double want = exponent == 0 ? sign * std::ldexp(mantissa, -24) : sign * std::ldexp(1024 + mantissa, exponent - 25);
    REQUIRE(double(got) == want);
    if (exponent != 0 || mantissa != 0) REQUIRE(float_to_half_bits(got) == h);  // the round trip
  }
  REQUIRE(bfloat16_bits_to_float(0x3F80) == 1.0f);
  REQUIRE(bfloat16_bits_to_float(0xC040) == -3.0f);
}

namespace {

// The batch's bits at (sample j, element i) for a dtype of `size` bytes.
std::uint32_t load(const std::vector<unsigned char>& data, std::size_t size, std::size_t at) {
  std::uint32_t v = 0;
  std::memcpy(&v, data.data() + at * size, size);
  return v;
}

// The value torchvision's three tensor ops give, each rounded to the type:
// rolled.mul_(1 - lam).add_(x.mul(lam)).
std::uint32_t mixed_reference(DType t, std::uint32_t cur, std::uint32_t prev, float own, float other) {
  const auto to_float = [t](std::uint32_t b) {
    return t == DType::float32 ? bits_float(b) : t == DType::float16 ? half_bits_to_float(std::uint16_t(b))
                                                                     : bfloat16_bits_to_float(std::uint16_t(b));
  };
  const auto round = [t](float f) -> float {
    if (t == DType::float16) return half_bits_to_float(float_to_half_bits(f));
    if (t == DType::bfloat16) return bfloat16_bits_to_float(float_to_bfloat16_bits(f));
    return f;
  };
  volatile float a = round(to_float(prev) * other);  // volatile: no fused multiply-add in the reference either
  volatile float b = round(to_float(cur) * own);
  const float sum = a + b;
  return t == DType::float32 ? float_bits(sum) : t == DType::float16 ? float_to_half_bits(sum) : float_to_bfloat16_bits(sum);
}

}  // namespace

TEST_CASE("the mix kernel's host twin: MixUp blends each sample with the one before it, CutMix copies the box from "
          "it, in place, with the soft labels",
          "[mix][device]") {
  auto device = host_device();
  const std::size_t n = 5, channels = 3, height = 7, width = 9, plane = height * width, classes = 6;
  const std::vector<std::int64_t> labels{0, 5, 5, 2, 0};
  for (const DType t : {DType::float32, DType::float16, DType::bfloat16}) {
    for (const bool cut : {false, true}) {
      INFO(dtype_name(t) << (cut ? " CutMix" : " MixUp"));
      const std::size_t size = dtype_size(t), elements = n * channels * plane;
      std::vector<unsigned char> before(elements * size);
      Rng rng(11, 0, std::uint64_t(t) * 2 + cut);
      for (std::size_t i = 0; i < elements; ++i) {
        const float v = float(rng.uniform(-2.5, 2.7));
        const std::uint32_t bits = t == DType::float32 ? float_bits(v)
                                   : t == DType::float16 ? float_to_half_bits(v)
                                                         : float_to_bfloat16_bits(v);
        std::memcpy(before.data() + i * size, &bits, size);
      }
      auto data = device->allocate(elements * size);
      auto soft = device->allocate(n * classes * sizeof(float));
      auto on_device_labels = device->allocate(n * sizeof(std::int64_t));
      std::memcpy(data->data(), before.data(), before.size());
      std::memcpy(on_device_labels->data(), labels.data(), n * sizeof(std::int64_t));
      const double lambda = 0.3137;
      MixJob job;
      job.data = data->data();
      job.samples = n;
      job.channels = channels;
      job.height = height;
      job.width = width;
      job.type = t;
      job.cut = cut;
      job.own = float(lambda);
      job.other = float(1.0 - lambda);
      job.x1 = cut ? 2 : 0;
      job.y1 = cut ? 1 : 0;
      job.x2 = cut ? 7 : std::uint32_t(width);
      job.y2 = cut ? 5 : std::uint32_t(height);
      job.labels = static_cast<const std::int64_t*>(on_device_labels->data());
      job.soft = static_cast<float*>(soft->data());
      job.classes = classes;
      auto stream = device->create_stream();
      kernels::mix(*device, job, *stream);
      device->synchronize(*stream);
      std::vector<unsigned char> after(elements * size);
      std::memcpy(after.data(), data->data(), after.size());
      std::size_t wrong = 0, changed = 0;
      for (std::size_t j = 0; j < n; ++j) {
        const std::size_t pj = (j + n - 1) % n;
        for (std::size_t c = 0; c < channels; ++c) {
          for (std::size_t y = 0; y < height; ++y) {
            for (std::size_t x = 0; x < width; ++x) {
              const std::size_t at = (j * channels + c) * plane + y * width + x;
              const std::size_t paired = (pj * channels + c) * plane + y * width + x;
              const bool inside = x >= job.x1 && x < job.x2 && y >= job.y1 && y < job.y2;
              const std::uint32_t cur = load(before, size, at), prev = load(before, size, paired);
              const std::uint32_t want = !inside ? cur : cut ? prev : mixed_reference(t, cur, prev, job.own, job.other);
              wrong += load(after, size, at) != want;
              changed += load(after, size, at) != cur;
            }
          }
        }
      }
      REQUIRE(wrong == 0);
      REQUIRE(changed > elements / (cut ? 4 : 2));
      const auto* s = static_cast<const float*>(soft->data());
      for (std::size_t j = 0; j < n; ++j) {
        float sum = 0;
        for (std::size_t k = 0; k < classes; ++k) {
          const std::int64_t own = labels[j], other = labels[(j + n - 1) % n];
          const float want = (other == std::int64_t(k) ? float(1.0 - lambda) : 0.f) + (own == std::int64_t(k) ? float(lambda) : 0.f);
          REQUIRE(s[j * classes + k] == want);
          sum += s[j * classes + k];
        }
        REQUIRE(std::abs(sum - 1.f) < 1e-6f);
      }
    }
  }
}

TEST_CASE("the mix step after normalize (and RandomErasing): each batch's draw from (seed, epoch, batch), the same "
          "bytes for any workers, soft labels and lambda with the batch",
          "[mix][device][pipeline]") {
  const std::size_t height = 4, width = 6, channels = 3, dataset = 23, classes = 3 * (dataset - 1) + 1;  // labels index * 3
  BatchMixing mixing;
  mixing.mixup = MixUp{0.4};
  mixing.cutmix = CutMix{1.0};
  mixing.num_classes = std::int64_t(classes);
  RandomErasing erasing;
  erasing.p = 0.5;
  std::map<std::size_t, std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<float>>> by_workers;
  for (std::size_t workers : {1, 3}) {
    for (std::size_t depth : {1, 2}) {
      INFO("workers " << workers << " depth " << depth);
      DeviceConfig dc;
      dc.max_delay_us = 30;
      dc.delay_seed = workers * 10 + depth;
      auto device = host_device(dc);
      Config cfg = small_config(workers, depth, 2);
      cfg.sample_bytes = height * width * channels;
      TransferConfig plain;
      plain.normalize = TransferConfig::Normalization{height, width, channels, Normalize{}, DType::float32};
      plain.batch_steps.push_back(Erase{erasing});
      TransferConfig tc = plain;
      tc.batch_steps.push_back(Mix{mixing});
      auto task = std::async(std::launch::async, [&] {
        // The same pipeline without the Mix step gives the batches before mixing.
        std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<float>> unmixed;
        {
          DevicePipeline dp(cfg, dataset, test::fill_pattern, plain, device);
          while (auto b = dp.next()) {
            const auto* out = static_cast<const float*>(b->data());
            unmixed[{b->host().epoch, b->host().index}].assign(out, out + b->size() * cfg.sample_bytes);
          }
        }
        DevicePipeline dp(cfg, dataset, test::fill_pattern, tc, device);
        std::size_t cutmixed = 0, batches = 0;
        while (auto b = dp.next()) {
          const Batch& hb = b->host();
          const std::size_t n = b->size();
          Rng rng(cfg.seed ^ kMixSeedSalt, hb.epoch, hb.index);
          const MixDraw d = draw_mix(mixing, height, width, rng);
          REQUIRE(b->extras().value(kMixLambda) == d.lambda);
          REQUIRE(b->extras().value(kMixCutMix) == (d.cutmix ? 1.0 : 0.0));
          const BatchTensor* soft = b->extras().tensor(kSoftLabels);
          REQUIRE(soft);
          REQUIRE(soft->shape == std::vector<std::int64_t>{std::int64_t(n), std::int64_t(classes)});
          const auto* s = static_cast<const float*>(soft->data);
          for (std::size_t j = 0; j < n; ++j) {
            const std::int64_t own = hb.labels[j], other = hb.labels[(j + n - 1) % n];
            for (std::size_t k = 0; k < classes; ++k) {
              REQUIRE(s[j * classes + k] == soft_label(own, other, std::int64_t(k), float(d.lambda), float(1.0 - d.lambda)));
            }
          }
          const std::vector<float>& x = unmixed.at({hb.epoch, hb.index});
          const auto* out = static_cast<const float*>(b->data());
          std::size_t wrong = 0;
          for (std::size_t j = 0; j < n; ++j) {
            const std::size_t pj = (j + n - 1) % n;
            for (std::size_t c = 0; c < channels; ++c) {
              for (std::size_t y = 0; y < height; ++y) {
                for (std::size_t xx = 0; xx < width; ++xx) {
                  const std::size_t e = (c * height + y) * width + xx;
                  const float cur = x[j * cfg.sample_bytes + e], prev = x[pj * cfg.sample_bytes + e];
                  const bool inside = xx >= d.x1 && xx < d.x2 && y >= d.y1 && y < d.y2;
                  const float want = !inside ? cur
                                     : d.cutmix ? prev
                                                : bits_float(mixed_reference(DType::float32, float_bits(cur), float_bits(prev),
                                                                             float(d.lambda), float(1.0 - d.lambda)));
                  wrong += out[j * cfg.sample_bytes + e] != want;
                }
              }
            }
          }
          REQUIRE(wrong == 0);
          for (std::size_t j = 0; j < n; ++j) {
            by_workers[workers][{hb.epoch, hb.indices[j]}].assign(out + j * cfg.sample_bytes,
                                                                  out + (j + 1) * cfg.sample_bytes);
          }
          cutmixed += d.cutmix;
          ++batches;
        }
        REQUIRE(batches == 2 * dp.batches_per_epoch());
        REQUIRE(dp.batch_steps().size() == 2);
        (void)cutmixed;
      });
      REQUIRE(task.wait_for(60s) == std::future_status::ready);
      task.get();
    }
  }
  REQUIRE(by_workers[1].size() == 2 * dataset);
  REQUIRE(by_workers[1] == by_workers[3]);  // the same bytes for 1 and 3 workers
}

TEST_CASE("the mix step needs normalize, num_classes and labels in range, and says which", "[mix][device]") {
  auto device = host_device();
  Config cfg = small_config(1, 1, 2);
  TransferConfig tc;
  tc.batch_steps.push_back(Mix{mixup_only(1.0)});
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 8, test::fill_pattern, tc, device), Catch::Contains("MixUp needs normalize on the device"));
  cfg.sample_bytes = 4 * 4 * 3;
  tc.normalize = TransferConfig::Normalization{4, 4, 3, Normalize{}, DType::float16};
  BatchMixing none = cutmix_only(1.0);
  none.num_classes = 0;
  tc.batch_steps = {Mix{none}};
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 8, test::fill_pattern, tc, device), Catch::Contains("CutMix num_classes must be set"));
  tc.batch_steps = {Mix{mixup_only(-1.0)}};
  REQUIRE_THROWS_WITH(DevicePipeline(cfg, 8, test::fill_pattern, tc, device), Catch::Contains("MixUp: alpha must be"));
  // Labels are index * 3: samples 4 to 7 are outside num_classes 10.
  tc.batch_steps = {Mix{mixup_only(1.0)}};
  auto task = std::async(std::launch::async, [&] {
    DevicePipeline dp(cfg, 8, test::fill_pattern, tc, device);
    REQUIRE_THROWS_WITH([&] { while (dp.next()) {} }(), Catch::Contains("MixUp: sample ") && Catch::Contains(", outside num_classes=10"));
  });
  REQUIRE(task.wait_for(60s) == std::future_status::ready);
  task.get();
}
