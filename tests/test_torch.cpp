// The LibTorch adapter (libtorch/tensors.h) and the models conveyor train uses.
// Built only with CONVEYOR_TORCH; runs on the host backend (Debian's LibTorch
// has no CUDA).
#include "catch_compat.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <torch/torch.h>

#include "device/mix_step.h"
#include "libtorch/determinism.h"
#include "libtorch/models.h"
#include "libtorch/tensors.h"
#include "support.h"

using namespace conveyor;

namespace {

constexpr std::size_t kH = 4, kW = 5, kC = 3;

std::shared_ptr<Device> host(HostTransfer t, bool poison) {
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  dc.host_transfer = t;
  dc.poison_released = poison;
  return open_device(dc);
}

Config config(std::size_t device_buffers) {
  Config cfg;
  cfg.batch_size = 3;
  cfg.sample_bytes = kH * kW * kC;
  cfg.workers = 2;
  cfg.epochs = 1;
  cfg.device_buffers = device_buffers;
  return cfg;
}

TransferConfig normalizing() {
  TransferConfig tc;
  tc.normalize = TransferConfig::Normalization{kH, kW, kC, Normalize{}, DType::float32};
  return tc;
}

// Every element of a normalized batch against (v / 255 - mean) / std of what fill_pattern wrote.
void require_normalized_values(const TensorBatch& t, const std::vector<std::uint64_t>& indices, std::uint64_t seed) {
  REQUIRE(t.images.sizes() == torch::IntArrayRef{std::int64_t(indices.size()), kC, kH, kW});
  REQUIRE(t.images.dtype() == torch::kFloat32);
  const auto img = t.images.accessor<float, 4>();
  for (std::size_t j = 0; j < indices.size(); ++j) {
    std::vector<std::byte> px(kH * kW * kC);
    test::expected_bytes(seed, 0, indices[j], px);
    for (std::size_t c = 0; c < kC; ++c) {
      for (std::size_t y = 0; y < kH; ++y) {
        for (std::size_t x = 0; x < kW; ++x) {
          const double v = double(std::uint8_t(px[(y * kW + x) * kC + c]));
          const double want = (v / 255.0 - Normalize{}.mean[c]) / Normalize{}.std[c];
          REQUIRE(img[std::int64_t(j)][std::int64_t(c)][std::int64_t(y)][std::int64_t(x)] == Approx(want).margin(1e-5));
        }
      }
    }
    REQUIRE(t.labels[std::int64_t(j)].item<std::int64_t>() == std::int64_t(indices[j] * 3));
  }
}

}  // namespace

TEST_CASE("to_tensors wraps a normalized batch without a copy, with the right values", "[torch]") {
  for (HostTransfer mode : {HostTransfer::copy, HostTransfer::handover}) {
    DevicePipeline p(config(0), 10, test::fill_pattern, normalizing(), host(mode, false));
    std::size_t seen = 0;
    while (auto b = p.next()) {
      void* data = b->data();
      const std::int64_t* labels = b->labels();  // what crossed with the pixels, not the host vector
      REQUIRE(labels != b->host().labels.data());
      const std::vector<std::uint64_t> indices = b->host().indices;
      const std::uint64_t batch_index = b->host().index;
      TensorBatch t = to_tensors(std::move(*b));
      REQUIRE(t.images.data_ptr() == data);  // no copy: the tensor is the slot
      REQUIRE(t.labels.data_ptr<std::int64_t>() == labels);
      REQUIRE(t.labels.dtype() == torch::kInt64);
      REQUIRE(t.images.device() == torch::Device(torch::kCPU));
      REQUIRE(t.index == batch_index);
      require_normalized_values(t, indices, 0);
      seen += indices.size();
    }
    REQUIRE(seen == 10);
  }
}

TEST_CASE("to_tensors gives MixUp's soft labels and lambda, sharing the batch", "[torch]") {
  TransferConfig tc = normalizing();
  BatchMixing m;
  m.mixup = MixUp{0.5};
  m.num_classes = 30;  // fill_pattern's labels are index * 3
  tc.batch_steps.push_back(Mix{m});
  DevicePipeline p(config(0), 10, test::fill_pattern, tc, host(HostTransfer::handover, false));
  std::size_t seen = 0;
  while (auto b = p.next()) {
    const BatchTensor* soft = b->extras().tensor(kSoftLabels);
    REQUIRE(soft);
    const double lambda = *b->extras().value(kMixLambda);
    const std::vector<std::int64_t> labels = b->host().labels;
    TensorBatch t = to_tensors(std::move(*b));
    REQUIRE(t.soft_labels.defined());
    REQUIRE(t.soft_labels.data_ptr() == soft->data);  // no copy
    REQUIRE(t.soft_labels.sizes() == torch::IntArrayRef{std::int64_t(labels.size()), 30});
    REQUIRE(t.soft_labels.dtype() == torch::kFloat32);
    REQUIRE(t.mix_lambda == lambda);
    // torchvision's _mixup_label: one_hot rolled by one, mixed by lambda.
    const torch::Tensor one_hot = torch::one_hot(t.labels, 30).to(torch::kFloat32);
    REQUIRE(torch::equal(t.soft_labels, one_hot.roll(1, 0).mul_(1.0 - lambda).add_(one_hot.mul(lambda))));
    seen += labels.size();
  }
  REQUIRE(seen == 10);
  TensorBatch plain = to_tensors(*DevicePipeline(config(0), 4, test::fill_pattern, normalizing(),
                                                 host(HostTransfer::handover, false)).next());
  REQUIRE_FALSE(plain.soft_labels.defined());
  REQUIRE(plain.mix_lambda == 1.0);
}

TEST_CASE("to_tensors over a handed-over uint8 batch is the workers' buffer itself", "[torch]") {
  DevicePipeline p(config(0), 7, test::fill_pattern, TransferConfig{}, host(HostTransfer::handover, false));
  auto b = p.next();
  REQUIRE(b);
  REQUIRE_THROWS_AS(to_tensors(std::move(*b)), std::invalid_argument);  // uint8 needs its shape; b is released

  b = p.next();
  REQUIRE(b);
  const std::byte* filled = b->host().data;
  std::vector<std::byte> copy(b->host().bytes().begin(), b->host().bytes().end());
  const auto n = std::int64_t(b->size());
  TensorBatch t = to_tensors(std::move(*b), ImageShape{kH, kW, kC});
  REQUIRE(t.images.data_ptr() == filled);
  REQUIRE(t.images.sizes() == torch::IntArrayRef{n, kH, kW, kC});
  REQUIRE(t.images.dtype() == torch::kUInt8);
  REQUIRE(std::memcmp(t.images.data_ptr(), copy.data(), copy.size()) == 0);
  const torch::Tensor nchw = t.images.permute({0, 3, 1, 2});  // a view, still the same memory
  REQUIRE(nchw.data_ptr() == filled);
  REQUIRE_THROWS_AS(to_tensors(DeviceBatch{}), std::invalid_argument);
}

TEST_CASE("to_tensors over a batch the workers normalized is float32 NCHW, the buffer itself", "[torch]") {
  // A filler standing in for ImageConfig::normalize: float32 CHW per sample,
  // element k of sample i holding i + k / 1000.
  Config cfg = config(0);
  cfg.sample_bytes = kC * kH * kW * sizeof(float);
  const Filler floats = [](Sample& s) {
    std::vector<float> v(kC * kH * kW);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(s.index) + float(k) / 1000.0f;
    std::memcpy(s.data.data(), v.data(), s.data.size());
    s.label = std::int64_t(s.index);
  };
  DevicePipeline p(cfg, 8, floats, TransferConfig{}, host(HostTransfer::handover, false));  // 3 batches
  auto b = p.next();
  REQUIRE(b);
  REQUIRE_THROWS_AS(to_tensors(std::move(*b), ImageShape{kH, kW, kC}), std::invalid_argument);  // 4x the uint8 size
  b = p.next();
  REQUIRE(b);
  // A product that wraps onto the sample size ((2^62 + kH) x kW x kC x 4 bytes): a
  // signed overflow before, then LibTorch's own c10::Error, not invalid_argument.
  REQUIRE_THROWS_AS(to_tensors(std::move(*b), ImageShape{(std::int64_t{1} << 62) + kH, kW, kC, true}),
                    std::invalid_argument);
  b = p.next();
  REQUIRE(b);
  const std::byte* filled = b->host().data;
  const std::vector<std::uint64_t> indices = b->host().indices;
  TensorBatch t = to_tensors(std::move(*b), ImageShape{kH, kW, kC, true});
  REQUIRE(t.images.data_ptr() == filled);
  REQUIRE(t.images.dtype() == torch::kFloat32);
  REQUIRE(t.images.sizes() == torch::IntArrayRef{std::int64_t(indices.size()), kC, kH, kW});
  const auto img = t.images.accessor<float, 4>();
  for (std::size_t j = 0; j < indices.size(); ++j)
    for (std::size_t c = 0; c < kC; ++c)
      for (std::size_t y = 0; y < kH; ++y)
        for (std::size_t x = 0; x < kW; ++x) {
          const std::size_t k = (c * kH + y) * kW + x;
          REQUIRE(img[std::int64_t(j)][std::int64_t(c)][std::int64_t(y)][std::int64_t(x)] ==
                  float(indices[j]) + float(k) / 1000.0f);
        }
}

TEST_CASE("the batch goes back to the pipeline only when the last tensor over it dies", "[torch]") {
  // One device slot: while any tensor over the batch lives, the pipeline cannot
  // hand out another (next() says so instead of hanging); poison on release
  // shows the exact moment the memory went back. The dataset is exactly one
  // batch, so nothing refills the slot after its release and the poison stays.
  DevicePipeline p(config(1), 3, test::fill_pattern, normalizing(), host(HostTransfer::copy, true));
  auto b = p.next();
  REQUIRE(b);
  const auto* raw = static_cast<const unsigned char*>(b->data());
  TensorBatch t = to_tensors(std::move(*b));
  const float first = t.images.flatten()[0].item<float>();

  torch::Tensor view = t.images.select(0, 0);  // shares the storage
  t = TensorBatch{};                          // both tensors of the batch are gone; the view is not
  REQUIRE_THROWS_AS(p.next(), std::logic_error);
  REQUIRE(view.flatten()[0].item<float>() == first);  // not recycled, not poisoned
  REQUIRE(raw[0] != 0xA5);

  view = torch::Tensor();  // the last reference: the deleter releases the slot
  REQUIRE(raw[0] == 0xA5);  // poisoned on release, as the pipeline recycles it
  REQUIRE(raw[3] == 0xA5);
  REQUIRE_FALSE(p.next());  // the one batch was the whole epoch (next-after-release: the autograd test)
}

TEST_CASE("autograd keeps the batch until backward has used it", "[torch]") {
  DevicePipeline p(config(1), 9, test::fill_pattern, normalizing(), host(HostTransfer::copy, false));
  auto conv = torch::nn::Conv2d(torch::nn::Conv2dOptions(kC, 2, 3));
  auto b = p.next();
  REQUIRE(b);
  torch::Tensor loss;
  {
    TensorBatch t = to_tensors(std::move(*b));
    loss = conv->forward(t.images).sum();  // the graph saves the input for the weight's gradient
  }
  REQUIRE_THROWS_AS(p.next(), std::logic_error);  // the graph still holds the batch
  loss.backward();                                 // frees the graph's saved tensors
  loss = torch::Tensor();
  REQUIRE(conv->weight.grad().defined());
  auto again = p.next();
  REQUIRE(again);
}

TEST_CASE("a batch whose last tensor dies on another thread is released there", "[torch]") {
  DevicePipeline p(config(2), 12, test::fill_pattern, normalizing(), host(HostTransfer::copy, false));
  std::size_t seen = 0;
  while (auto b = p.next()) {
    seen += b->size();
    TensorBatch t = to_tensors(std::move(*b));
    std::thread([images = std::move(t.images), labels = std::move(t.labels)]() mutable {
      images = torch::Tensor();
      labels = torch::Tensor();
    }).join();
  }
  REQUIRE(seen == 12);
}

TEST_CASE("models: LeNet-5 and the small ResNet give log-probabilities per class", "[torch][models]") {
  torch::manual_seed(0);
  auto lenet = make_model({"lenet", 3, 10, 32});
  const torch::Tensor a = lenet->forward(torch::randn({2, 3, 32, 32}));
  REQUIRE(a.sizes() == torch::IntArrayRef{2, 10});
  REQUIRE(a.exp().sum(1).sub(1).abs().max().item<float>() < 1e-5);
  auto resnet = make_model({"resnet", 3, 7, 64});
  REQUIRE(resnet->forward(torch::randn({2, 3, 64, 64})).sizes() == torch::IntArrayRef{2, 7});
  REQUIRE_THROWS_AS(make_model({"lenet", 3, 10, 64}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_model({"vgg", 3, 10, 32}), std::invalid_argument);
  REQUIRE_THROWS_AS(make_model({"resnet", 3, 1, 64}), std::invalid_argument);
}

TEST_CASE("make_deterministic switches LibTorch's deterministic settings on", "[torch][determinism]") {
  const std::string said = make_deterministic();
  CHECK(at::globalContext().deterministicAlgorithms());
  CHECK(at::globalContext().deterministicCuDNN());
  CHECK_FALSE(at::globalContext().benchmarkCuDNN());
  REQUIRE(std::getenv("CUBLAS_WORKSPACE_CONFIG") != nullptr);
  CHECK(std::string(std::getenv("CUBLAS_WORKSPACE_CONFIG")) == ":4096:8");
  CHECK(said.find("CUBLAS_WORKSPACE_CONFIG=:4096:8") != std::string::npos);
  // A model's forward and backward still run (every op used has a deterministic kernel).
  torch::manual_seed(3);
  auto model = make_model({"lenet", 3, 10, 32});
  auto x = torch::randn({4, 3, 32, 32});
  auto loss = torch::nll_loss(model->forward(x), torch::tensor({1, 2, 3, 4}));
  loss.backward();
  CHECK(std::isfinite(loss.item<double>()));
}
