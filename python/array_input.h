// arrays=(x, y) as the Loader takes it from Python: x's rows read in place
// (a NumPy array or anything with the buffer protocol; a torch tensor, or any
// object with __array__, on the CPU through the array that gives), y's labels
// copied and checked one by one. Each refusal is one ValueError line that
// names x or y and, for a label, its row.
//
// Thread safety: Python's; everything here runs with the GIL held, except
// that the bytes of a HeldRows may be read by any thread while it lives.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "python/loader.h"

namespace conveyor::python {

namespace py = pybind11;

// An element type's name as NumPy and torch spell it ("uint8", "bool", "bfloat16").
std::string dtype_name(Element e);
// The buffer protocol's format character, or "" where it has none (bfloat16).
std::string buffer_format(Element e);
// The element a buffer format names ('?' is bool), or nullopt for any other.
std::optional<Element> element_of_format(std::string f);

// x's bytes, C-contiguous, held (and x with them) until destruction. Throws
// ValueError naming x: not C-contiguous, on a device other than the CPU, or
// an object that gives no array at all.
class HeldRows {
 public:
  explicit HeldRows(const py::handle& x);
  ~HeldRows();
  HeldRows(const HeldRows&) = delete;
  HeldRows& operator=(const HeldRows&) = delete;

  // The rows as the Loader reads them (labels left empty). Throws ValueError
  // for an element type Conveyor does not take, or a 0-d x.
  ArrayRows rows() const;
  // The rows: x's first axis (0 for a 0-d x, which rows() refuses).
  std::size_t count() const { return view_.ndim < 1 ? 0 : std::size_t(view_.shape[0]); }

 private:
  py::object source_;  // x itself, or the array x.__array__() gave
  Py_buffer view_{};
};

// y's labels, one per row: any integer dtype or sequence of Python integers
// (a torch tensor too). Throws ValueError for a float, a bool, a label
// outside 0..kMaxLabel (naming its row), a y that is not 1-D, or a count
// other than `rows`.
std::vector<std::int64_t> labels_of(const py::handle& y, std::size_t rows);

}  // namespace conveyor::python
