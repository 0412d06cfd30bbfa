// docs/training.md's complete example: LeNet-5 trained with LibTorch on
// Conveyor's batches, each batch two tensors over the pipeline's own memory.
#include <cstdio>

#include <torch/torch.h>

#include "data/files/image_folder.h"
#include "libtorch/models.h"
#include "libtorch/tensors.h"
#include "image/default_dataset.h"
#include "image/image_source.h"

int main() {
  auto dataset = conveyor::dataset_from_folder(conveyor::ensure_default_dataset());  // or dataset_from_list("train.txt")
  conveyor::Config config;
  config.batch_size = 64;
  config.workers = 2;
  config.epochs = 3;
  conveyor::ImageConfig images_cfg;  // Resize 32, RandomCrop 32 with padding 4, flip
  images_cfg.transforms = {conveyor::Resize{32, {}}, conveyor::RandomCrop{{32, 32}, 4, 4, 4, 4, false},
                           conveyor::RandomHorizontalFlip{}};
  conveyor::ImageSource images(dataset, images_cfg, config.workers);
  config.sample_bytes = images.sample_bytes();

  // CUDA with a CUDA LibTorch; otherwise the host backend hands its buffers over.
  conveyor::DeviceConfig device_cfg;
  if (!torch::cuda::is_available()) {
    device_cfg.backend = conveyor::BackendChoice::host;
    device_cfg.host_transfer = conveyor::HostTransfer::handover;
  }
  auto device = conveyor::open_device(device_cfg);
  conveyor::TransferConfig transfer;  // uint8 crosses the bus; float32 NCHW is made on the device
  transfer.normalize = conveyor::TransferConfig::Normalization{32, 32, 3, {}, conveyor::DType::float32};
  transfer.current_consumer_stream = conveyor::torch_current_stream(*device);  // LibTorch's stream, at each next()
  conveyor::DevicePipeline pipeline(config, dataset.size(), images.filler(), transfer, device);

  torch::manual_seed(0);
  auto model = conveyor::make_model({"lenet", 3, dataset.num_classes(), 32});
  model->to(conveyor::torch_device(*device));
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (std::uint64_t e = 0; e < config.epochs; ++e) {
    double loss_sum = 0;
    std::int64_t seen = 0;
    for (auto& batch : pipeline.epoch(e)) {
      conveyor::TensorBatch t = conveyor::to_tensors(std::move(batch));  // no copy
      const torch::Tensor& labels = t.labels;  // on the images' device already
      sgd.zero_grad();
      const torch::Tensor loss = torch::nll_loss(model->forward(t.images), labels);
      loss.backward();
      sgd.step();
      loss_sum += loss.item<double>() * double(labels.size(0));
      seen += labels.size(0);
    }  // t has died: the batch is back in the pipeline
    std::printf("epoch %llu: %lld images, train loss %.3f\n", (unsigned long long)e, (long long)seen,
                loss_sum / double(seen));
  }
}
