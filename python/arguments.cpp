// The argument checks of python/arguments.h. Each error is one line naming
// the keyword; messages are built only when there is one.
#include "python/arguments.h"

#include <cmath>
#include <string_view>

namespace conveyor::python {

bool is_bool(const py::handle& v) {
  const std::string_view type = Py_TYPE(v.ptr())->tp_name;
  return PyBool_Check(v.ptr()) || type == "numpy.bool_" || type == "numpy.bool";
}

std::string shown(const char* name, const py::handle& v) {
  std::string text;
  try {
    text = py::repr(v).cast<std::string>();
  } catch (const py::error_already_set&) {
    text = "<" + std::string(Py_TYPE(v.ptr())->tp_name) + ">";
  }
  if (text.size() > 60) text = text.substr(0, 40) + "...";
  return std::string(name) + "=" + text;
}

std::uint64_t whole(const char* name, const py::handle& v, std::uint64_t lo, std::uint64_t hi) {
  if (PyBool_Check(v.ptr())) throw py::type_error(shown(name, v) + ": expected an integer, not a bool");
  PyObject* index = PyNumber_Index(v.ptr());
  if (!index) {
    // Not an index: a TypeError of our own wording. Anything else __index__
    // raised (KeyboardInterrupt) goes on as it is.
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
    throw py::type_error(shown(name, v) + ": expected an integer, not " + std::string(Py_TYPE(v.ptr())->tp_name));
  }
  const auto n = py::reinterpret_steal<py::int_>(index);
  if (n < py::int_(lo) || n > py::int_(hi)) {
    throw py::value_error(shown(name, v) + (lo == 0 && n < py::int_(0) ? ": expected a non-negative integer"
                                                                        : ": expected " + std::to_string(lo) + " to " +
                                                                              std::to_string(hi)));
  }
  return n.cast<std::uint64_t>();
}

double non_negative(const char* name, const py::handle& v) {
  const std::string_view type = Py_TYPE(v.ptr())->tp_name;
  const bool real = PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr()) || PyIndex_Check(v.ptr()) ||
                    type.starts_with("numpy.float") || type == "numpy.longdouble" || type == "numpy.half";
  if (is_bool(v) || !real) {
    throw py::type_error(shown(name, v) + ": expected a number, not " + std::string(type));
  }
  const double x = PyFloat_AsDouble(v.ptr());  // an int too large for a double raises OverflowError
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(shown(name, v) + ": too large");
  }
  if (!std::isfinite(x) || x < 0) throw py::value_error(shown(name, v) + ": expected a finite number >= 0");
  return x;
}

bool flag(const char* name, const py::handle& v) {
  if (is_bool(v)) return PyObject_IsTrue(v.ptr()) == 1;
  throw py::type_error(shown(name, v) + ": expected True or False, not " + std::string(Py_TYPE(v.ptr())->tp_name));
}

std::optional<std::string> text(const char* name, const py::handle& v, bool optional) {
  if (optional && v.is_none()) return std::nullopt;
  if (!py::isinstance<py::str>(v)) {
    throw py::type_error(shown(name, v) + ": expected a str" + (optional ? " or None" : "") + ", not " +
                         std::string(Py_TYPE(v.ptr())->tp_name));
  }
  return v.cast<std::string>();
}

std::optional<std::string> path(const char* name, const py::handle& v) {
  if (v.is_none()) return std::nullopt;
  py::object p = py::reinterpret_borrow<py::object>(v);
  if (!py::isinstance<py::str>(p) && !py::isinstance<py::bytes>(p) && py::hasattr(p, "__fspath__")) {
    p = py::module_::import("os").attr("fspath")(p);
  }
  if (py::isinstance<py::bytes>(p)) return p.cast<std::string>();
  if (py::isinstance<py::str>(p)) {
    // As os.fsencode: a name that is not UTF-8, as os.listdir gives it
    // (surrogateescape), is its bytes again.
    PyObject* bytes = PyUnicode_EncodeFSDefault(p.ptr());
    if (!bytes) throw py::error_already_set();
    return py::reinterpret_steal<py::bytes>(bytes).cast<std::string>();
  }
  throw py::type_error(shown(name, v) + ": expected a path (str, bytes or os.PathLike), not " +
                       std::string(Py_TYPE(v.ptr())->tp_name));
}

std::optional<py::tuple> pair(const char* name, const py::handle& v) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) return py::tuple(py::reinterpret_borrow<py::object>(v));
  throw py::type_error(std::string(name) + "=: expected a pair (x, y), not " + std::string(Py_TYPE(v.ptr())->tp_name));
}

}  // namespace conveyor::python
