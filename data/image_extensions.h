// Which files are images: torchvision's IMG_EXTENSIONS, the rule an image
// folder (data/files/image_folder.h) and a shard's members
// (data/shards/shard_index.h) both follow, and `conveyor pack` checks.
#pragma once

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <string_view>

namespace conveyor {

// Lower case, with the dot: ".jpg", ".jpeg", ... Throws nothing.
inline constexpr std::array<std::string_view, 13> kImageExtensions = {
    ".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".pbm", ".pnm", ".bmp", ".tga", ".gif", ".tif", ".tiff", ".webp"};

// Whether `ext` (with its dot: ".JPG") is one of kImageExtensions, ignoring
// ASCII case. Throws bad_alloc only.
inline bool is_image_extension(std::string_view ext) {
  std::string lower(ext);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return std::find(kImageExtensions.begin(), kImageExtensions.end(), lower) != kImageExtensions.end();
}

}  // namespace conveyor
