#include "libtorch/models.h"

#include <stdexcept>

#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace conveyor {

namespace {

namespace F = torch::nn::functional;

// LeNet-5 (LeCun et al., 1998) with ReLU and max pooling, as in the PyTorch
// tutorials: conv 5x5 (6) -> pool -> conv 5x5 (16) -> pool -> 120 -> 84 -> classes.
class LeNet5 final : public Net {
 public:
  LeNet5(std::int64_t channels, std::int64_t classes)
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 6, 5)))),
        conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 16, 5)))),
        fc1_(register_module("fc1", torch::nn::Linear(16 * 5 * 5, 120))),
        fc2_(register_module("fc2", torch::nn::Linear(120, 84))),
        fc3_(register_module("fc3", torch::nn::Linear(84, classes))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = F::max_pool2d(torch::relu(conv1_(x)), F::MaxPool2dFuncOptions(2));  // 32 -> 28 -> 14
    x = F::max_pool2d(torch::relu(conv2_(x)), F::MaxPool2dFuncOptions(2));  // 14 -> 10 -> 5
    x = x.flatten(1);
    x = torch::relu(fc1_(x));
    x = torch::relu(fc2_(x));
    return torch::log_softmax(fc3_(x), 1);
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  torch::nn::Linear fc1_, fc2_, fc3_;
};

torch::nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// He et al.'s basic block: two 3x3 convolutions with batch norm, and a 1x1
// projection on the shortcut when the shape changes.
class BasicBlock final : public torch::nn::Module {
 public:
  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1_(register_module("conv1", conv3x3(in, out, stride))),
        bn1_(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", conv3x3(out, out, 1))),
        bn2_(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      shortcut_ = register_module(
          "shortcut", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                            torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = torch::relu(bn1_(conv1_(x)));
    y = bn2_(conv2_(y));
    return torch::relu(y + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::BatchNorm2d bn1_;
  torch::nn::Conv2d conv2_;
  torch::nn::BatchNorm2d bn2_;
  torch::nn::Sequential shortcut_{nullptr};
};

// A small ResNet for 64-128 px inputs on a CPU: a stride-2 stem, then three
// stages of two basic blocks (16, 32, 64 channels; the last two halve the
// size), global average pooling and one linear layer. About 0.18 M parameters.
class SmallResNet final : public Net {
 public:
  SmallResNet(std::int64_t channels, std::int64_t classes)
      : stem_(register_module("stem", conv3x3(channels, 16, 2))),
        bn_(register_module("bn", torch::nn::BatchNorm2d(16))),
        fc_(register_module("fc", torch::nn::Linear(64, classes))) {
    const std::int64_t widths[] = {16, 32, 64};
    std::int64_t in = 16;
    for (int s = 0; s < 3; ++s) {
      for (int b = 0; b < 2; ++b) {
        const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
        blocks_.push_back(register_module("block" + std::to_string(s) + "_" + std::to_string(b),
                                          std::make_shared<BasicBlock>(in, widths[s], stride)));
        in = widths[s];
      }
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(bn_(stem_(x)));
    for (auto& b : blocks_) x = b->forward(x);
    x = x.mean({2, 3});
    return torch::log_softmax(fc_(x), 1);
  }

 private:
  torch::nn::Conv2d stem_;
  torch::nn::BatchNorm2d bn_;
  torch::nn::Linear fc_;
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
};

}  // namespace

std::int64_t default_input(const std::string& model) { return model == "resnet" ? 64 : 32; }

std::shared_ptr<Net> make_model(const ModelSpec& spec) {
  if (spec.classes < 2) throw std::invalid_argument("model: classes must be >= 2 (got " + std::to_string(spec.classes) + ")");
  if (spec.channels < 1) throw std::invalid_argument("model: channels must be >= 1");
  if (spec.name == "lenet") {
    if (spec.input != 32) {
      throw std::invalid_argument("model: lenet takes 32 x 32 inputs (--crop 32), not " + std::to_string(spec.input));
    }
    return std::make_shared<LeNet5>(spec.channels, spec.classes);
  }
  if (spec.name == "resnet") {
    if (spec.input < 32 || spec.input > 512) {
      throw std::invalid_argument("model: resnet takes 32..512 px inputs (64..128 intended), not " + std::to_string(spec.input));
    }
    return std::make_shared<SmallResNet>(spec.channels, spec.classes);
  }
  throw std::invalid_argument("model: unknown model '" + spec.name + "' (lenet or resnet)");
}

}  // namespace conveyor
