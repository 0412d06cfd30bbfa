// arrays=(x, y) from Python objects: python/array_input.h.
#include "python/array_input.h"

#include <string_view>
#include <utility>

#include "python/arguments.h"
#include "data/dataset.h"

namespace conveyor::python {

std::string dtype_name(Element e) {
  if (e.kind == 'b') return "bfloat16";
  if (e.kind == '?') return "bool";
  return std::string(e.kind == 'u' ? "uint" : e.kind == 'i' ? "int" : "float") + std::to_string(e.bits);
}

std::string buffer_format(Element e) {
  switch (e.kind) {
    case 'u': return e.bits == 8 ? "B" : e.bits == 16 ? "H" : e.bits == 32 ? "I" : "Q";
    case 'i': return e.bits == 8 ? "b" : e.bits == 16 ? "h" : e.bits == 32 ? "i" : "q";
    case 'f': return e.bits == 16 ? "e" : e.bits == 32 ? "f" : "d";
    case '?': return "?";
    default: return "";
  }
}

std::optional<Element> element_of_format(std::string f) {
  if (f.size() > 1 && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f.erase(0, 1);
  if (f.size() != 1) return std::nullopt;
  switch (f[0]) {
    case 'B': return Element{'u', 8};
    case 'b': return Element{'i', 8};
    case 'H': return Element{'u', 16};
    case 'h': return Element{'i', 16};
    case 'I': return Element{'u', 32};
    case 'i': return Element{'i', 32};
    case 'L': case 'Q': return Element{'u', 64};
    case 'l': case 'q': return Element{'i', 64};
    case 'e': return Element{'f', 16};
    case 'f': return Element{'f', 32};
    case 'd': return Element{'f', 64};
    case '?': return Element{'?', 8};
    default: return std::nullopt;
  }
}

namespace {

std::string type_of(const py::handle& v) { return Py_TYPE(v.ptr())->tp_name; }

// The first line of the Python exception being raised, which is cleared.
std::string fetch_first_line() {
  py::error_already_set e;
  std::string what = e.what();
  if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
  return what;
}

// The device an object with __dlpack_device__ says it is on, as "cuda:0",
// or "" for the CPU (and for an object that does not say).
std::string device_of(const py::handle& x) {
  if (!py::hasattr(x, "__dlpack_device__")) return "";
  try {
    const auto d = x.attr("__dlpack_device__")().cast<std::pair<int, int>>();
    if (d.first == 1 || d.first == 3) return "";  // kDLCPU, kDLCUDAHost
    return (d.first == 2 ? std::string("cuda:") : "DLPack device type " + std::to_string(d.first) + ":") +
           std::to_string(d.second);
  } catch (const py::error_already_set&) {
    return "";
  } catch (const py::cast_error&) {
    return "";
  }
}

// Whether the buffer of `obj` can be had C-contiguous; fills `view` if so.
bool contiguous_buffer(const py::handle& obj, Py_buffer& view) {
  if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) return true;
  PyErr_Clear();
  return false;
}

}  // namespace

HeldRows::HeldRows(const py::handle& x) {
  if (PyObject_CheckBuffer(x.ptr())) {
    source_ = py::reinterpret_borrow<py::object>(x);
    if (!contiguous_buffer(source_, view_)) {
      throw py::value_error("arrays: x must be C-contiguous (np.ascontiguousarray(x))");
    }
    return;
  }
  if (const std::string device = device_of(x); !device.empty()) {
    throw py::value_error("arrays: x is on " + device + "; arrays= reads rows in host memory (x.cpu())");
  }
  if (!py::hasattr(x, "__array__")) {
    throw py::value_error("arrays: x must be an array (NumPy's, a torch tensor on the CPU, or anything with the buffer "
                          "protocol or __array__), not " + type_of(x));
  }
  // A torch tensor on the CPU gives a NumPy view of its own memory here.
  try {
    source_ = x.attr("__array__")();
  } catch (const py::error_already_set&) {
    throw py::value_error("arrays: x.__array__() failed: " + fetch_first_line());
  }
  if (!PyObject_CheckBuffer(source_.ptr())) {
    throw py::value_error("arrays: x.__array__() gave a " + type_of(source_) + ", not an array with the buffer protocol");
  }
  if (!contiguous_buffer(source_, view_)) {
    throw py::value_error("arrays: x (a " + type_of(x) + ") must be C-contiguous (x.contiguous())");
  }
}

HeldRows::~HeldRows() {
  if (view_.obj) PyBuffer_Release(&view_);
}

ArrayRows HeldRows::rows() const {
  const char* format = view_.format ? view_.format : "B";
  const auto element = element_of_format(format);
  if (!element) {
    throw py::value_error(std::string("arrays: x has an element type Conveyor does not take (format '") + format + "')");
  }
  if (view_.itemsize != element->bits / 8) {
    throw py::value_error(std::string("arrays: x's format '") + format + "' and item size " +
                          std::to_string(view_.itemsize) + " disagree");
  }
  if (view_.ndim < 1) throw py::value_error("arrays: x must have a first axis (the samples)");
  ArrayRows rows;
  rows.data = {static_cast<const std::byte*>(view_.buf), std::size_t(view_.len)};
  rows.row_shape.assign(view_.shape + 1, view_.shape + view_.ndim);
  rows.element = *element;
  return rows;
}

namespace {

// arrays=' y holds integers, or a ValueError: pybind11's cast to int64 would
// truncate NumPy floats (0.99 -> 0), complex and bools with a warning at most.
// An array by its format; a sequence (a list, a torch tensor) element by
// element, as __index__ takes each (a float tensor's elements refuse).
void check_integer_labels(const py::handle& y) {
  const auto refuse = [](const std::string& got) {
    throw py::value_error("arrays: y must hold integer labels (int8 to int64, uint8 to uint64), not " + got);
  };
  if (PyObject_CheckBuffer(y.ptr())) {
    const py::buffer_info info = py::reinterpret_borrow<py::buffer>(y).request();
    std::string f = info.format;
    if (f.size() > 1 && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '>' || f[0] == '!')) f.erase(0, 1);
    if (f != "O") {  // Python objects (a NumPy object array) are checked one by one below
      const auto e = element_of_format(f);
      if (!e || e->kind == 'f' || e->kind == '?') refuse("elements of format '" + info.format + "'");
      return;
    }
  }
  if (!py::isinstance<py::sequence>(y) || py::isinstance<py::str>(y)) return;  // labels_of's own error follows
  for (const py::handle item : y) {
    if (is_bool(item)) refuse("a bool");
    PyObject* index = PyNumber_Index(item.ptr());
    if (!index) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
      PyErr_Clear();
      refuse("a " + type_of(item));
    }
    Py_DECREF(index);
  }
}

}  // namespace

std::vector<std::int64_t> labels_of(const py::handle& y, std::size_t rows) {
  check_integer_labels(y);
  const auto not_1d = [&y] {
    return py::value_error("arrays: y must be a 1-D sequence of integer labels, one per row of x; got " +
                           py::str(py::type::of(y)).cast<std::string>());
  };
  // A NumPy array or torch tensor as Python ints: a tensor's elements are
  // 0-d tensors, and a uint64 array's may exceed int64.
  py::object items = py::reinterpret_borrow<py::object>(y);
  if (py::hasattr(y, "tolist") && !py::isinstance<py::list>(y)) items = y.attr("tolist")();
  if (!py::isinstance<py::sequence>(items) || py::isinstance<py::str>(items)) throw not_1d();
  const py::sequence seq = py::reinterpret_borrow<py::sequence>(items);
  std::vector<std::int64_t> labels;
  labels.reserve(seq.size());
  for (const py::handle item : seq) {
    const std::size_t i = labels.size();
    PyObject* index = PyNumber_Index(item.ptr());
    if (!index) {
      PyErr_Clear();
      throw not_1d();  // a row of a 2-D y is a list
    }
    const auto n = py::reinterpret_steal<py::int_>(index);
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
    if (overflow != 0 || v < 0 || v > kMaxLabel) {
      throw py::value_error("arrays: y[" + std::to_string(i) + "] = " + py::str(n.ptr()).cast<std::string>() +
                            ": a label must be 0 to " + std::to_string(kMaxLabel));
    }
    labels.push_back(v);
  }
  if (labels.size() != rows) {
    throw py::value_error("arrays: x has " + std::to_string(rows) + " samples but y has " + std::to_string(labels.size()) +
                          " labels");
  }
  return labels;
}

}  // namespace conveyor::python
