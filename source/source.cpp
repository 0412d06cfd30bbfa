#include "source/source.h"
#include "data/files/image_folder.h"
#include "data/files/list_file.h"
#include "data/shards/shard_dataset.h"
#include "device/erase_step.h"
#include "device/mix_step.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace conveyor {

Dataset open_dataset(const DatasetSpec& spec, Config& config) {
  const auto named = [&spec](const std::string& what) { return DatasetError(spec.setting + what); };
  const bool remote = spec.kind == DatasetSpec::Kind::shards && is_remote_location(spec.path);
  // One rank's whole shards; the pipeline then runs over them as rank 0 of 1.
  const auto as_rank = [&](const auto& subset) {
    Dataset d = [&] {
      try {
        return subset();
      } catch (const std::invalid_argument& e) {
        throw DatasetError(spec.rank_by_shard_setting + e.what());
      }
    }();
    config.rank = 0;
    config.world_size = 1;
    return d;
  };
  if (remote && spec.rank_by_shard) {  // only the rank's shards are downloaded
    return as_rank([&] { return fetch_rank_shards(spec.path, spec.remote, config.rank, config.world_size, config.shard_policy); });
  }
  Dataset d = [&] {
    switch (spec.kind) {
      case DatasetSpec::Kind::shards:
        return remote ? open_remote_shards(spec.path, spec.remote) : dataset_from_shards(spec.path, spec.unlisted);
      case DatasetSpec::Kind::list: return dataset_from_list(spec.path);
      case DatasetSpec::Kind::folder: break;
    }
    return dataset_from_folder(spec.path);  // refuses a folder without images itself
  }();
  if (spec.kind == DatasetSpec::Kind::list && d.size() == 0) throw named(spec.path + ": no samples (an empty list)");
  if (!spec.rank_by_shard) return d;
  return as_rank([&] { return d.rank_subset(config.rank, config.world_size, config.shard_policy); });
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
    transfer.batch_steps.push_back(parts.gpu.transfer_for(*parts.images));
  }
  // The list's RandomErasing follows Normalize: on the device, after it.
  if (const auto erasing = parts.images->augment().erasing()) transfer.batch_steps.push_back(Erase{*erasing});
  // MixUp and CutMix mix whole batches after that: the last step.
  if (auto mixing = parts.images->augment().mixing()) {
    const std::int64_t classes = parts.images->dataset().num_classes(), stated = mixing->stated_classes();
    if (stated && stated < classes) {
      throw DatasetError(std::string(mixing->name()) + ": num_classes=" + std::to_string(stated) +
                         ", but the dataset's labels go up to " + std::to_string(classes - 1));
    }
    mixing->num_classes = stated ? stated : classes;
    transfer.batch_steps.push_back(Mix{*mixing});
  }
  return parts;
}

TransferConfig::Normalization device_normalization(const ImageSource& images, DType out_type) {
  const Size out = images.output();
  TransferConfig::Normalization n{std::size_t(out.height), std::size_t(out.width), 3, Normalize{}, out_type};
  for (const ViewLayout& v : images.views()) n.views.push_back({std::size_t(v.out.height), std::size_t(v.out.width)});
  return n;
}

}  // namespace conveyor
