// The embedded default dataset: a deterministic, learnable, labelled set of
// JPEG images generated on first use, so `conveyor run` and the examples work
// on a fresh clone with no download. Ten classes of rendered shapes and
// textures (disk, square, triangle, ring, cross, horizontal/vertical/diagonal
// stripes, checkerboard, dots), each image 64-128 px a side with a random
// position, size, colours and pixel noise drawn from Rng(seed, class, image).
// The shape decides the class, so a small network learns it quickly.
//
// Layout: ImageFolder, <dir>/<class name>/<nnnnn>.jpg, readable with
// dataset_from_folder. A `.complete` file marks a finished set; writing goes to
// a temporary folder renamed into place, so a crash never leaves a partial set
// that looks complete.
// Thread safety: the functions are reentrant; two processes may race to create
// the same folder, and one of them wins the rename.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor {

struct DefaultDatasetOptions {
  std::size_t images_per_class = 300;  // Default: 300 (3,000 images, about 10 MB)
  std::uint64_t seed = 2026;           // Default: 2026
  int quality = 90;                    // JPEG quality. Default: 90
  // Asked before each image; true stops the writing with DatasetCancelled
  // (a signal caught by the command). Default: none, never stops.
  std::function<bool()> cancelled;
};

// What write_default_dataset throws when `cancelled` said stop: the images
// written so far are left in `dir` for the caller to remove.
struct DatasetCancelled : std::runtime_error {
  std::size_t written, total;
  DatasetCancelled(std::size_t w, std::size_t t)
      : std::runtime_error("default dataset: cancelled"), written(w), total(t) {}
};

// The class names, in label order.
const std::vector<std::string>& default_dataset_classes();

// Writes the set into `dir` (created; must not already hold a set). Throws
// std::runtime_error naming the file and the reason for a write or encode
// failure, DatasetCancelled when options.cancelled says stop. Either way what
// was written stays: write into a temporary folder and rename it, as
// ensure_default_dataset and `conveyor make-dataset` do.
void write_default_dataset(const std::filesystem::path& dir, const DefaultDatasetOptions& options = {});

// The cache folder: $CONVEYOR_CACHE, else user_cache_dir() ($XDG_CACHE_HOME/
// conveyor, $HOME/.cache/conveyor, or a private TMPDIR/conveyor-UID); with a
// subfolder naming the set's version and options. Throws std::runtime_error
// when none qualifies.
std::filesystem::path default_dataset_dir(const DefaultDatasetOptions& options = {});

// The cached set, generated first if missing or incomplete. Returns its folder.
// `made` is set to true when this call generated it.
std::filesystem::path ensure_default_dataset(const DefaultDatasetOptions& options = {}, bool* made = nullptr);

}  // namespace conveyor
