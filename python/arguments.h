// The Loader's argument checks: each takes a keyword's Python value and gives
// the C++ value, or raises a one-line TypeError or ValueError that names the
// keyword ("batch_size=-1: expected a non-negative integer"). pybind11's own
// conversions would answer with the whole signature, take True as 1 and None
// as False, and truncate floats.
//
// Thread safety: Python's; each is called with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace conveyor::python {

namespace py = pybind11;

// A Python bool or NumPy's (numpy.bool_, numpy.bool in NumPy 2): refused
// where an integer or a number is asked for, the one kind a flag takes.
bool is_bool(const py::handle& v);

// "name=repr(v)" for an error message; built only when there is one (a repr
// may raise, or exceed Python's digit limit for a huge int).
std::string shown(const char* name, const py::handle& v);

// An integer argument (batch_size=, seed=, crop=, ...) as Python takes an
// index: an int or anything with __index__ (NumPy's integers), not a bool or a
// float, in [lo, hi].
std::uint64_t whole(const char* name, const py::handle& v, std::uint64_t lo = 0,
                    std::uint64_t hi = std::numeric_limits<std::uint64_t>::max());

// A real-valued argument: an int or a float (not a bool), finite, >= 0.
// NumPy's scalars count as the integers and floats they are (np.int64(512),
// np.float32(0.5)), as whole() takes an integer by its __index__.
double non_negative(const char* name, const py::handle& v);

// True or False (NumPy's bool_ too).
bool flag(const char* name, const py::handle& v);

// A str argument (nullopt for None where `optional`).
std::optional<std::string> text(const char* name, const py::handle& v, bool optional = false);

// A path argument: None, a str, bytes or an os.PathLike (pathlib.Path), as
// torchvision takes it, as the bytes os.fsencode gives (a name that is not
// UTF-8, as os.listdir gives it with surrogateescape, is its bytes again).
std::optional<std::string> path(const char* name, const py::handle& v);

// arrays=: (x, y) as a tuple or a list; None for no arrays.
std::optional<py::tuple> pair(const char* name, const py::handle& v);

// A str keyword naming one of `choices`: its value, or a ValueError listing them.
template <typename T, std::size_t N>
T pick(const std::string& what, const std::string& value, const std::array<std::pair<const char*, T>, N>& choices) {
  std::string names;
  for (auto& [name, v] : choices) {
    if (value == name) return v;
    names += names.empty() ? name : std::string(", ") + name;
  }
  throw py::value_error(what + "=" + value + ": expected one of " + names);
}

// The name `choices` gives `value` ("?" for none): a default in a signature.
template <typename T, std::size_t N>
const char* name_of(T value, const std::array<std::pair<const char*, T>, N>& choices) {
  for (auto& [name, v] : choices) {
    if (v == value) return name;
  }
  return "?";
}

}  // namespace conveyor::python
