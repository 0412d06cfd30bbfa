// An image folder, torchvision's ImageFolder layout root/<class>/.../<image>,
// read into a Dataset.
#pragma once

#include <filesystem>

#include "data/dataset.h"

namespace conveyor {

// Class directories (symlinks followed), sorted
// by name in byte order, give labels 0..K-1 and classes(). Inside a class directory files are found recursively,
// following directory symlinks (a link back to a directory being walked is not entered again), in
// torchvision's order: by directory path, then by file name. A file is kept when its extension
// (case-insensitive) is an image's (data/image_extensions.h). Entries whose name starts with '.' are skipped, and
// so are files directly in root. Never reads image bytes. The dataset's source() is `root`.
// Throws DatasetError naming the path when root is missing or not a directory, holds no class
// directory, a directory cannot be listed, or a class holds no image file (naming every such class).
Dataset dataset_from_folder(const std::filesystem::path& root);

}  // namespace conveyor
