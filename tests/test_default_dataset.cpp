// The embedded default dataset: deterministic, complete, decodable, and laid
// out as an ImageFolder.
#include "catch_compat.h"
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <unistd.h>

#include "data/dataset.h"
#include "data/files/image_folder.h"
#include "image/decode.h"
#include "image/default_dataset.h"

using namespace conveyor;
namespace fs = std::filesystem;

namespace {
std::vector<char> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST_CASE("the default dataset is an ImageFolder of decodable JPEGs, the same bytes every time", "[default_dataset]") {
  const fs::path root = fs::temp_directory_path() / ("conveyor-default-" + std::to_string(::getpid()));
  fs::remove_all(root);
  DefaultDatasetOptions o;
  o.images_per_class = 4;
  write_default_dataset(root / "a", o);
  write_default_dataset(root / "b", o);
  REQUIRE(fs::exists(root / "a" / ".complete"));
  const Dataset ds = dataset_from_folder(root / "a");
  REQUIRE(ds.size() == 40);
  REQUIRE(ds.classes() == default_dataset_classes());
  ImageDecoder decoder;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const fs::path p = ds.path(i);
    const auto bytes = slurp(p);
    REQUIRE(bytes == slurp(root / "b" / fs::relative(p, root / "a")));  // deterministic
    const std::span<const unsigned char> data(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
    const ImageInfo info = decoder.open(data);
    REQUIRE(info.format == ImageFormat::jpeg);
    REQUIRE(info.width >= 64);
    REQUIRE(info.width <= 128);
    const DecodedView v = decoder.decode(Rect{0, 0, info.width, info.height}, 1.0);
    REQUIRE(v.width == info.width);
  }
  fs::remove_all(root);
}

TEST_CASE("ensure_default_dataset makes the set once, in the cache folder", "[default_dataset]") {
  const fs::path cache = fs::temp_directory_path() / ("conveyor-cache-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  REQUIRE(::setenv("CONVEYOR_CACHE", cache.c_str(), 1) == 0);
  DefaultDatasetOptions o;
  o.images_per_class = 2;
  bool made = false;
  const fs::path dir = ensure_default_dataset(o, &made);
  REQUIRE(made);
  REQUIRE(dir.parent_path() == cache);
  REQUIRE(dataset_from_folder(dir).size() == 20);
  REQUIRE(ensure_default_dataset(o, &made) == dir);
  REQUIRE_FALSE(made);
  // An interrupted set (no marker) is made again.
  fs::remove(dir / ".complete");
  REQUIRE(ensure_default_dataset(o, &made) == dir);
  REQUIRE(made);
  ::unsetenv("CONVEYOR_CACHE");
  fs::remove_all(cache);
}
