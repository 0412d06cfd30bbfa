#include "data/shards/shard_dataset.h"

namespace conveyor {

Dataset dataset_from_shards(const std::filesystem::path& dir, UnlistedShards unlisted) {
  return dataset_from_index(dir, load_shard_index(dir, nullptr, PartialFolders::refuse, unlisted));
}

Dataset dataset_from_index(const std::filesystem::path& dir, const ShardIndex& index) {
  DatasetBuilder b;
  for (const auto& shard : index.shards) b.add_container(dir / shard.file);
  for (const auto& sample : index.samples) {
    b.add_member(sample.shard, sample.member, {sample.offset, sample.size}, sample.label, sample.source);
  }
  b.set_classes(index.classes);
  return b.build(dir);
}

}  // namespace conveyor
