// A list file: one sample a line, `path label`, read into a Dataset.
#pragma once

#include <filesystem>

#include "data/dataset.h"

namespace conveyor {

// The label is the last whitespace-separated field, a
// non-negative decimal integer that fits int64; the path is everything before it, trimmed, and may
// contain spaces. Relative paths resolve against the list file's folder ("parent / path"), each
// path with its "." segments and doubled slashes taken out ("./a//1.jpg" is "a/1.jpg"; ".." stays,
// and a path ending in '/' or "/." is kept as written). Lines that are blank or
// whose first non-blank char is '#' are skipped; CRLF endings and a UTF-8 BOM are accepted, a CR
// anywhere else (CR-only line ends) is an error.
// A list with no samples gives size 0. Does not open or stat the images. The
// dataset's source() is `list_file`; it has no classes().
// Throws DatasetError "file:line: reason" for a malformed line (no label, a label that is not a
// non-negative integer or overflows int64, an empty path, a NUL byte), and "file: reason" for a
// list file that is missing, a directory or anything else that is not a regular file (a FIFO, a
// device), unreadable or fails mid-read.
Dataset dataset_from_list(const std::filesystem::path& list_file);

}  // namespace conveyor
