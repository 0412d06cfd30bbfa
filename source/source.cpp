#include "source/source.h"

#include <stdexcept>
#include <utility>

namespace conveyor {

Dataset open_dataset(const DatasetSpec& spec, Config& config) {
  const auto named = [&spec](const std::string& what) { return DatasetError(spec.setting + what); };
  Dataset d = [&] {
    switch (spec.kind) {
      case DatasetSpec::Kind::shards: {
        const std::filesystem::path dir = is_remote_location(spec.path) ? fetch_shards(spec.path, spec.remote)
                                                                          : std::filesystem::path(spec.path);
        return Dataset::from_shards(dir, spec.unlisted);
      }
      case DatasetSpec::Kind::list: return Dataset::from_list(spec.path);
      case DatasetSpec::Kind::folder: break;
    }
    return Dataset::from_folder(spec.path);  // refuses a folder without images itself
  }();
  if (spec.kind == DatasetSpec::Kind::list && d.size() == 0) throw named(spec.path + ": no samples (an empty list)");
  if (!spec.rank_by_shard) return d;
  try {
    d = d.rank_subset(config.rank, config.world_size, config.shard_policy);
  } catch (const std::invalid_argument& e) {
    throw DatasetError(spec.rank_by_shard_setting + e.what());
  }
  config.rank = 0;
  config.world_size = 1;
  return d;
}

ImageSourceParts build_image_source(Dataset dataset, ImageConfig image, std::size_t workers,
                                    std::optional<double> gpu_decode, Device& device, TransferConfig& transfer,
                                    std::size_t gpu_decode_threads) {
  ImageSourceParts parts;
  parts.images = std::make_unique<ImageSource>(std::move(dataset), image, workers);
  parts.gpu = choose_gpu_decode(gpu_decode, *parts.images, device, workers, gpu_decode_threads);
  if (parts.gpu.share > 0) {  // the workers leave that share to the transfer stage's decoder
    image.gpu_share = parts.gpu.share;
    Dataset same = parts.images->dataset();
    parts.images = std::make_unique<ImageSource>(std::move(same), std::move(image), workers);
    transfer.batch_step = parts.gpu.transfer_for(*parts.images);
  }
  return parts;
}

}  // namespace conveyor
