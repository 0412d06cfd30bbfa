// The one source builder (source/source.h) that the command and the Python
// module share: which dataset a spec opens and what the messages name, a rank's
// whole shards, and the GPU decoder's share reaching both the image source and
// the transfer settings (on the host backend, whose twin runs the GPU path).
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "catch_compat.h"
#include "device/device_pipeline.h"
#include "shards.h"
#include "source/source.h"
#include "temp_dir.h"

using namespace conveyor;

namespace {

std::shared_ptr<Device> host() {
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  return open_device(dc);
}

}  // namespace

TEST_CASE("source: a spec opens its kind of dataset, and an empty list is named by the surface's setting", "[source]") {
  test::TempDir dir;
  const auto made = test::write_shards(dir.path(), 12, 4);  // 3 shards of 4, and a list over the same files
  Config cfg;
  const Dataset list = open_dataset({DatasetSpec::Kind::list, made.list.string()}, cfg);
  const Dataset shards = open_dataset({DatasetSpec::Kind::shards, made.shards.string()}, cfg);
  REQUIRE(list.size() == 12);
  REQUIRE(shards.size() == 12);
  const auto empty = dir.path() / "empty.txt";
  std::ofstream(empty) << "# nothing here\n";
  REQUIRE_THROWS_WITH(open_dataset({DatasetSpec::Kind::list, empty.string(), UnlistedShards::refuse, false, "--list "}, cfg),
                      Catch::Contains("--list " + empty.string() + ": no samples (an empty list)"));
  REQUIRE_THROWS_WITH(open_dataset({DatasetSpec::Kind::list, empty.string(), UnlistedShards::refuse, false, "list="}, cfg),
                      Catch::Contains("list=" + empty.string() + ": no samples"));
  REQUIRE_THROWS_AS(open_dataset({DatasetSpec::Kind::folder, (dir.path() / "none").string()}, cfg), DatasetError);
}

TEST_CASE("source: rank_by_shard takes the rank's whole shards and runs the pipeline as rank 0 of 1", "[source]") {
  test::TempDir dir;
  const auto made = test::write_shards(dir.path(), 12, 4);
  std::size_t total = 0;
  for (std::size_t r = 0; r < 3; ++r) {
    Config cfg;
    cfg.rank = r;
    cfg.world_size = 3;
    const Dataset d = open_dataset({DatasetSpec::Kind::shards, made.shards.string(), UnlistedShards::refuse, true}, cfg);
    REQUIRE(d.size() == 4);
    REQUIRE(cfg.rank == 0);
    REQUIRE(cfg.world_size == 1);
    total += d.size();
  }
  REQUIRE(total == 12);
  Config four;
  four.rank = 3;
  four.world_size = 4;  // 3 shards cannot go whole to 4 ranks: named by the surface's setting
  REQUIRE_THROWS_WITH(open_dataset({DatasetSpec::Kind::shards, made.shards.string(), UnlistedShards::refuse, true, "",
                                    "--rank-by-shard: "},
                                   four),
                      Catch::StartsWith("--rank-by-shard: "));
}

TEST_CASE("source: a GPU decode share reaches the image source and the transfer settings, off leaves both alone", "[source]") {
  test::TempDir dir;
  const auto made = test::write_shards(dir.path(), 8, 8);
  Config cfg;
  const Dataset d = open_dataset({DatasetSpec::Kind::list, made.list.string()}, cfg);
  ImageConfig ic;
  ic.transforms = {Resize{16, {}}, CenterCrop{{16, 16}}};
  auto device = host();
  SECTION("off") {
    TransferConfig tc;
    const ImageSourceParts parts = build_image_source(d, ic, 2, 0.0, *device, tc);
    REQUIRE(parts.gpu.share == 0);
    REQUIRE(parts.images->config().gpu_share == 0);
    REQUIRE(tc.batch_steps.empty());
    REQUIRE(parts.images->sample_bytes() == 16 * 16 * 3);
  }
  SECTION("a share, on the host backend's twin") {
    TransferConfig tc;
    const ImageSourceParts parts = build_image_source(d, ic, 2, 0.5, *device, tc);
    REQUIRE(parts.gpu.share == 0.5);
    REQUIRE(parts.images->config().gpu_share == 0.5);
    REQUIRE(gpu_decode_of(tc));
    REQUIRE(gpu_decode_of(tc)->deferred == parts.images->deferred_decodes());
    REQUIRE(gpu_decode_of(tc)->decoders.size() == 2 * kDefaultGpuDecodeThreads);  // two per feed thread
    REQUIRE(gpu_decode_of(tc)->threads == kDefaultGpuDecodeThreads);
  }
}
