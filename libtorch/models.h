// The models `conveyor train` trains: LeNet-5 for 32 x 32 inputs (the classic
// two-queue example) and a small residual network for 64-128 px inputs.
// Both take normalized float images [N, C, H, W] and return log-probabilities
// [N, classes] (log_softmax), for torch::nll_loss.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace conveyor {

class Net : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

struct ModelSpec {
  std::string name = "lenet";  // "lenet" or "resnet"
  std::int64_t channels = 3;   // input channels
  std::int64_t classes = 10;
  std::int64_t input = 32;     // input height = width: 32 for lenet; 64..128 for resnet
};

// The input size a model expects by default: 32 for lenet, 64 for resnet.
std::int64_t default_input(const std::string& model);

// Throws std::invalid_argument naming the field for an unknown name, a lenet
// input other than 32, a resnet input outside 32..512, or classes < 2.
std::shared_ptr<Net> make_model(const ModelSpec& spec);

}  // namespace conveyor
