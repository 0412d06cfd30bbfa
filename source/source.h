// Source: the one place where a dataset spec becomes what a DevicePipeline
// runs, for the conveyor command and the Python module alike: the dataset (a
// list file, an image folder or a folder of tar shards, local or at an
// http(s):// or s3:// URL; one rank's whole shards with rank_by_shard), then the image
// filler over it with the GPU decoder's share and the transfer settings that
// share needs. Each surface turns its own flags or keywords into a
// DatasetSpec, and the errors here into its own (the command's UsageError,
// Python's ValueError); the memory check between the two is
// device/memory_budget.h's.
//
//   Config cfg = ...;                                       // rank, world_size, workers
//   Dataset d = open_dataset({DatasetSpec::Kind::shards, "train/"}, cfg);
//   TransferConfig tc;
//   ImageSourceParts parts = build_image_source(d, image_config, cfg.workers, std::nullopt, *device, tc);
//   cfg.sample_bytes = parts.images->sample_bytes();
//   DevicePipeline p(cfg, d.size(), parts.images->filler(), tc, device);
//
// Thread safety: functions of their arguments, called before a pipeline starts.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "data/dataset.h"
#include "data/remote/remote_shards.h"
#include "data/shards/shard_index.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "gpu_decode/share.h"
#include "image/image_source.h"
#include "pipeline/config.h"

namespace conveyor {

struct DatasetSpec {
  enum class Kind { list, folder, shards };
  Kind kind = Kind::folder;
  std::string path;
  // shards: a tar in the folder that its manifest does not list. Default:
  // refused by name (a validation shard copied in would join training).
  UnlistedShards unlisted = UnlistedShards::refuse;
  // shards: each rank reads whole shards (Dataset::rank_subset) instead of
  // every world_size-th sample. Default: off.
  bool rank_by_shard = false;
  // How the surface names the dataset's setting and rank_by_shard in its
  // messages: "--list " and "--rank-by-shard: " for the command, "list=" and
  // "rank_by_shard=True: " for Python. Default: none.
  std::string setting, rank_by_shard_setting;
  // shards given as an http(s):// or s3:// URL: the cache and the fetching
  // (data/remote/remote_shards.h). Default: RemoteOptions's.
  RemoteOptions remote;
};

// The dataset `spec` names, for config's rank of config's world_size (shards
// at an http(s):// or s3:// URL: fetch_shards() into the cache first, then the cache
// folder read as a local one; with rank_by_shard, fetch_rank_shards(): the
// rank's shards alone). With
// rank_by_shard: that rank's whole shards, and config's rank and world_size
// become 0 and 1, since the pipeline then runs over them alone. Throws
// DatasetError naming the setting and the path: a list with no samples
// ("--list PATH: no samples (an empty list)"), a folder without images, a
// rank its shards cannot serve; the dataset's own messages otherwise.
Dataset open_dataset(const DatasetSpec& spec, Config& config);

// The image filler over a dataset, and the share of it the GPU decoder takes.
struct ImageSourceParts {
  std::unique_ptr<ImageSource> images;  // must outlive the pipeline whose filler it is
  GpuDecodeChoice gpu;                  // share 0: the workers decode every sample
};

// The ImageSource over `dataset`, then the GPU decoder's share of it
// (`gpu_decode`: 0 off, a share in (0, 1], nullopt auto, measured on `device`;
// choose_gpu_decode, with `gpu_decode_threads` feed threads, 0 for the
// default). With a share above 0 the source is rebuilt to leave that share to
// the transfer stage, and a GpuDecode for it is added to transfer.batch_steps.
// A RandomErasing ending the image's transforms is added there after it (an
// Erase step: it needs transfer.normalize by the time the pipeline is made),
// and MixUp and CutMix ending them last (a Mix step with soft labels, its
// num_classes the transforms' or the dataset's; DatasetError when the
// transforms' is below the dataset's).
// The rest of `transfer` is left as it was. Throws what ImageSource's constructor and
// choose_gpu_decode throw.
ImageSourceParts build_image_source(Dataset dataset, ImageConfig image, std::size_t workers,
                                    std::optional<double> gpu_decode, Device& device, TransferConfig& transfer,
                                    std::size_t gpu_decode_threads = 0);

// Normalize on the device (TransferConfig::normalize) for what `images`
// writes: its output size, or with ImageConfig::views each view a tensor of
// its own; ImageNet's mean and std, 3 channels, out_type. Throws nothing.
TransferConfig::Normalization device_normalization(const ImageSource& images, DType out_type);

}  // namespace conveyor
