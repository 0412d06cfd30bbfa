// The README's complete example: images from a folder, decoded and augmented by
// worker threads, normalized on the device, consumed epoch by epoch.
#include <cstdio>

#include "data/files/image_folder.h"
#include "device/device_pipeline.h"
#include "image/default_dataset.h"
#include "image/image_source.h"

int main() {
  auto dataset = conveyor::dataset_from_folder(conveyor::ensure_default_dataset());  // or your train/ folder
  conveyor::Config config;  // every field documented, with its default, in pipeline/config.h
  config.batch_size = 64;
  config.workers = 4;
  config.epochs = 2;
  conveyor::ImageConfig images_cfg;
  images_cfg.transforms = {conveyor::RandomResizedCrop{{64, 64}}, conveyor::RandomHorizontalFlip{}};
  conveyor::ImageSource images(dataset, images_cfg, config.workers);
  config.sample_bytes = images.sample_bytes();  // 64 * 64 * 3, uint8 HWC

  auto device = conveyor::open_device({});  // CUDA when present, else the host backend
  conveyor::TransferConfig transfer;        // transfer.consumer_stream = your cudaStream_t
  transfer.normalize = conveyor::TransferConfig::Normalization{64, 64, 3, {}, conveyor::DType::float32};
  conveyor::DevicePipeline pipeline(config, dataset.size(), images.filler(), transfer, device);
  for (std::uint64_t e = 0; e < config.epochs; ++e) {
    std::size_t seen = 0;
    for (auto& batch : pipeline.epoch(e)) {
      seen += batch.size();  // train_step(batch.data(), batch.shape(), batch.host().labels)
    }
    std::printf("epoch %llu: %zu images\n%s", (unsigned long long)e, seen, pipeline.stats().table().c_str());
  }
}
