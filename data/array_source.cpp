#include "data/array_source.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace conveyor {

ArraySource::ArraySource(std::span<const std::byte> data, std::size_t row_bytes, std::span<const std::int64_t> labels)
    : data_(data), row_bytes_(row_bytes), labels_(labels) {
  if (row_bytes == 0) throw std::invalid_argument("arrays: rows of 0 bytes (an axis of length 0 after the first)");
  if (data.size() % row_bytes != 0) {
    throw std::invalid_argument("arrays: " + std::to_string(data.size()) + " bytes are not whole rows of " +
                                std::to_string(row_bytes));
  }
  rows_ = data.size() / row_bytes;
  if (labels.size() != rows_) {
    throw std::invalid_argument("arrays: " + std::to_string(rows_) + " samples but " + std::to_string(labels.size()) +
                                " labels");
  }
}

void ArraySource::fill(Sample& s) const {
  // A pipeline built for other rows: the copy would overrun the slot or the array, or leave bytes unwritten.
  if (s.data.size() != row_bytes_) {
    throw std::invalid_argument("arrays: the pipeline's sample_bytes is " + std::to_string(s.data.size()) +
                                " but a row is " + std::to_string(row_bytes_) + " bytes");
  }
  if (s.index >= rows_) {
    throw std::invalid_argument("arrays: sample index " + std::to_string(s.index) + " is past the " +
                                std::to_string(rows_) + " rows (the pipeline's dataset_size is larger)");
  }
  std::memcpy(s.data.data(), data_.data() + s.index * row_bytes_, row_bytes_);
  s.label = labels_[s.index];
}

}  // namespace conveyor
