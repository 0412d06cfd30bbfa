// ArraySource: the sample filler for a dataset held in memory as one array
// whose first axis is the samples (a NumPy array handed over by the Python
// module, or read_npy's): sample i is row i, copied as is into its slot, with
// label labels[i].
//
//   ArraySource rows(bytes, row_bytes, labels);   // views: the caller keeps them alive
//   config.sample_bytes = rows.sample_bytes();
//   Pipeline pipeline(config, rows.size(), {rows.filler()});
//
// It owns nothing: the rows and labels must stay alive and unchanged while a
// pipeline uses it. No transforms: rows are tensors already (normalize them on
// the device with TransferConfig::normalize when they are uint8 HWC images).
//
// Thread safety: immutable after construction; fill() runs on any number of
// workers at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pipeline/pipeline.h"

namespace conveyor {

class ArraySource {
 public:
  // data: rows of row_bytes each (row_bytes > 0, data.size() a multiple of
  // it); labels: one per row. Throws std::invalid_argument naming the mismatch.
  ArraySource(std::span<const std::byte> data, std::size_t row_bytes, std::span<const std::int64_t> labels);

  std::size_t size() const { return rows_; }
  std::size_t sample_bytes() const { return row_bytes_; }

  // Copies row s.index into s.data and sets its label. Throws
  // std::invalid_argument (the pipeline fails) unless s.data holds a row and
  // s.index < size(): a config of another sample_bytes or dataset_size.
  void fill(Sample& s) const;
  // fill() as the pipeline's Filler; refers to this ArraySource.
  Filler filler() const {
    return [this](Sample& s) { fill(s); };
  }

 private:
  std::span<const std::byte> data_;
  std::size_t row_bytes_ = 0, rows_ = 0;
  std::span<const std::int64_t> labels_;
};

}  // namespace conveyor
