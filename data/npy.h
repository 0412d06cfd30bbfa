// NumPy .npy files for datasets held in memory: read_npy loads a whole array whose first axis is the
// samples (rows), read_npy_labels a 1-d integer array as labels, write_npy saves one (for tests and
// converting data). Reads versions 1.0, 2.0 and 3.0, C order, little-endian uint8, int32, int64 and
// float32; anything else is an NpyError, never a guess.
// Thread safety: free functions with no shared state, safe to call from many threads at once (on
// different files where one writes). An NpyArray is a plain value that owns its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <vector>

namespace conveyor {

// The element types read_npy accepts, with their .npy descr: '|u1', '<i4', '<i8', '<f4'.
enum class NpyType { uint8, int32, int64, float32 };

// Bytes per element: 1, 4, 8, 4. Throws nothing.
std::size_t npy_type_size(NpyType type);
// "uint8", "int32", "int64", "float32". Throws nothing.
const char* npy_type_name(NpyType type);

// A .npy file that cannot be read, written or accepted. what() is one line starting with the file
// name, then the field or problem: "data/x.npy: descr '>f4': big-endian data is not supported".
class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A whole array in memory. For arrays from read_npy, shape has at least one dimension, the size
// computations below cannot overflow, and data holds exactly rows() * row_bytes() bytes.
struct NpyArray {
  NpyType type = NpyType::uint8;
  std::vector<std::size_t> shape;  // C order; shape[0] = rows (samples)
  std::vector<std::byte> data;     // the elements in C order, little-endian (the host's order)

  // shape[0], or 0 when shape is empty. Throws nothing.
  std::size_t rows() const;
  // Elements per row: the product of shape[1..], 1 for a 1-d array. Throws nothing.
  std::size_t row_elements() const;
  // row_elements() * npy_type_size(type). Throws nothing.
  std::size_t row_bytes() const;
  // Row i's bytes, a view into data. Throws std::out_of_range unless i < rows() and data holds the row.
  std::span<const std::byte> row(std::size_t i) const;
};

// Reads a whole .npy file. Rejects, with an NpyError naming the file and the reason: a file that
// cannot be opened or read, is not a .npy file (bad magic) or is cut short, a format version other
// than 1.0, 2.0 or 3.0, a header over 1 MiB or not a Python dict literal with exactly the keys 'descr',
// 'fortran_order' and 'shape', a descr other than the four types above (big-endian included),
// fortran_order True, a 0-d shape (), a shape whose byte size overflows size_t, and a data section
// shorter or longer than the shape needs. Never allocates more than the file holds.
NpyArray read_npy(const std::filesystem::path& file);

// Writes a .npy file as numpy does: a version 1.0 header (2.0 only when the header would pass 64 KiB),
// padded so the data starts at a multiple of 64 bytes, then data. shape may be empty (0-d, one
// element), though read_npy refuses that. A failed write may leave a partial file behind.
// Throws std::invalid_argument, naming the file, when data.size() is not the shape's byte size or
// that size overflows size_t; NpyError when the file cannot be created or written.
void write_npy(const std::filesystem::path& file, NpyType type, std::span<const std::size_t> shape,
               std::span<const std::byte> data);

// Reads a 1-d uint8, int32 or int64 array as labels, values as stored (negatives included).
// Throws what read_npy throws, and NpyError naming the file when the array is not 1-d or not of an
// integer type.
std::vector<std::int64_t> read_npy_labels(const std::filesystem::path& file);

}  // namespace conveyor
