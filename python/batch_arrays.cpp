// The batches Python holds: python/batch_arrays.h.
#include "python/batch_arrays.h"

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "python/arguments.h"
#include "python/array_input.h"

namespace conveyor::python {

using namespace pybind11::literals;

namespace {

// A DLPack export: keeps the batch alive until the consumer calls the
// deleter; or, for copy=True, owns a copy of its bytes and keeps nothing.
struct Export {
  std::shared_ptr<Held> held;
  std::vector<std::byte> copy;
  std::vector<std::int64_t> shape, strides;
  DLManagedTensor tensor{};
};

void delete_export(DLManagedTensor* t) { delete static_cast<Export*>(t->manager_ctx); }

// Frees an export nobody took ("dltensor" still); a consumer renames it "used_dltensor".
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (t && t->deleter) t->deleter(t);
}

// DLPack 0.8's code for bool (one byte, 0 or 1); the 0.6 header lacks it.
constexpr std::uint8_t kDLBoolCode = 6;

std::uint8_t dlpack_code(Element el) {
  switch (el.kind) {
    case 'u': return kDLUInt;
    case 'i': return kDLInt;
    case 'f': return kDLFloat;
    case '?': return kDLBoolCode;
    default: return kDLBfloat;
  }
}

py::tuple dlpack_device(const Array& a) {
  return a.on_cuda() ? py::make_tuple(int(kDLCUDA), a.held->batch.device().ordinal()) : py::make_tuple(int(kDLCPU), 0);
}

// __dlpack__ as the array API standard (2023.12) has it: stream=,
// max_version=, dl_device=, copy=. The capsule is always the unversioned
// "dltensor" (the header is DLPack 0.6), which the standard allows whatever
// max_version asks: a consumer checks the capsule's name. copy=True copies a
// host array's bytes (the batch goes back at once); a CUDA array is not copied.
py::capsule to_dlpack(const Array& a, const py::object& stream_arg, const py::object& max_version,
                      const py::object& dl_device, const py::object& copy_arg) {
  if (!max_version.is_none()) {
    const bool pair = py::isinstance<py::tuple>(max_version) && py::len(max_version) == 2 &&
                      PyLong_Check(max_version[py::int_(0)].ptr()) && PyLong_Check(max_version[py::int_(1)].ptr());
    if (!pair) throw py::type_error(shown("__dlpack__(max_version", max_version) + "): expected None or (major, minor)");
  }
  if (!copy_arg.is_none() && !PyBool_Check(copy_arg.ptr())) {
    throw py::type_error(shown("__dlpack__(copy", copy_arg) + "): expected None, True or False");
  }
  const bool copy = copy_arg.is_none() ? false : copy_arg.cast<bool>();
  const py::tuple here = dlpack_device(a);
  if (!dl_device.is_none() && !dl_device.equal(here)) {
    throw py::buffer_error(shown("__dlpack__(dl_device", dl_device) + "): this Array is on " + std::string(py::repr(here)) +
                           " (DLPack device, index); Conveyor does not move it to another device");
  }
  std::optional<std::intptr_t> stream;
  if (!stream_arg.is_none()) {
    if (!PyLong_Check(stream_arg.ptr())) throw py::type_error(shown("__dlpack__(stream", stream_arg) + "): expected an int or None");
    stream = stream_arg.cast<std::intptr_t>();
  }
  if (!a.on_cuda() && stream && *stream != -1) {
    throw py::buffer_error(shown("__dlpack__(stream", stream_arg) + "): this Array is in host memory, which has no "
                           "stream: pass None");
  }
  if (a.on_cuda() && copy) {
    throw py::buffer_error("__dlpack__(copy=True): a cuda Array is not copied here; take it (torch.from_dlpack) and copy that");
  }
  if (a.on_cuda() && stream != -1) {
    // DLPack's stream: None or 1 the legacy default stream, 2 the per-thread
    // one, else a cudaStream_t, passed as is (cudaStreamLegacy is 0x1). The
    // per-thread one is refused (support for streams is optional in the
    // standard): the batch may be released on another thread, whose own
    // per-thread stream is not the one that read it.
    if (stream == 2) {
      throw py::buffer_error("__dlpack__(stream=2): the per-thread default stream is not supported; pass an explicit stream");
    }
    void* s = stream ? reinterpret_cast<void*>(*stream) : nullptr;
    if (s == reinterpret_cast<void*>(1)) s = nullptr;
    if (s != a.held->ready_on) a.held->batch.use_on(s);
  }
  auto e = std::make_unique<Export>();
  e->shape = a.shape();
  e->strides = a.strides();
  const Element el = a.element();
  DLTensor& t = e->tensor.dl_tensor;
  if (copy) {
    // C order: a view's rows are gathered, a sample apart in the batch.
    std::size_t row = el.bits / 8;
    for (std::size_t i = 1; i < e->shape.size(); ++i) row *= std::size_t(e->shape[i]);
    const auto* from = static_cast<const std::byte*>(a.data());
    const std::size_t rows = std::size_t(e->shape[0]), step = std::size_t(e->strides[0]) * (el.bits / 8);
    e->copy.resize(rows * row);
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(e->copy.data() + r * row, from + r * step, row);
    e->strides = c_order_strides(e->shape);
    t.data = e->copy.data();
  } else {
    e->held = a.held;
    t.data = a.data();
  }
  t.device = a.on_cuda() ? DLDevice{kDLCUDA, a.held->batch.device().ordinal()} : DLDevice{kDLCPU, 0};
  t.ndim = std::int32_t(e->shape.size());
  t.dtype = DLDataType{dlpack_code(el), el.bits, 1};
  t.shape = e->shape.data();
  t.strides = e->strides.data();
  t.byte_offset = 0;
  e->tensor.manager_ctx = e.get();
  e->tensor.deleter = delete_export;
  DLManagedTensor* raw = &e->tensor;
  py::capsule capsule(raw, "dltensor", capsule_destructor);
  e.release();  // the capsule (or the consumer that renames it) owns it now
  return capsule;
}

py::buffer_info to_buffer(const Array& a) {
  const Element el = a.element();
  const auto shape = a.shape();
  std::vector<py::ssize_t> strides;
  for (const std::int64_t st : a.strides()) strides.push_back(py::ssize_t(st) * (el.bits / 8));
  return py::buffer_info(a.data(), el.bits / 8, buffer_format(el), py::ssize_t(shape.size()),
                         std::vector<py::ssize_t>(shape.begin(), shape.end()), strides, /*readonly=*/false);
}

}  // namespace

py::object wrap(std::shared_ptr<Held> held, Part part, int view) {
  const bool cuda = held->batch.device().backend() == Backend::cuda;
  Array a{std::move(held), part, view};
  if (!cuda && !buffer_format(a.element()).empty()) return py::cast(HostArray{std::move(a)});
  return py::cast(std::move(a));
}

namespace {

// A host Array as a NumPy view (keeping the batch alive), for indexing and
// iteration; a TypeError for one NumPy cannot view (cuda, bfloat16).
py::object as_numpy(const Array& a) {
  if (a.on_cuda() || buffer_format(a.element()).empty()) {
    throw py::type_error("conveyor.Array of " + dtype_name(a.element()) + " on " +
                         (a.on_cuda() ? "cuda" : std::string("the host")) +
                         ": index a tensor of it instead (torch.from_dlpack(a)[i])");
  }
  return py::module_::import("numpy").attr("asarray")(py::cast(HostArray{a}));
}

}  // namespace

void bind_arrays(py::module_& m) {
  py::class_<Array>(m, "Array", "images or labels of one batch, shared with the pipeline (zero copy)")
      .def("__dlpack__", &to_dlpack, py::kw_only(), "stream"_a = py::none(), "max_version"_a = py::none(),
           "dl_device"_a = py::none(), "copy"_a = py::none())
      .def("__dlpack_device__", &dlpack_device)
      .def_property_readonly("shape", [](const Array& a) { return py::tuple(py::cast(a.shape())); })
      .def_property_readonly("dtype", [](const Array& a) { return dtype_name(a.element()); })
      .def_property_readonly("device", [](const Array& a) {
        return a.on_cuda() ? "cuda:" + std::to_string(a.held->batch.device().ordinal()) : std::string("cpu");
      })
      .def_property_readonly("epoch", [](const Array& a) { return a.held->batch.host().epoch; })
      .def_property_readonly("index", [](const Array& a) { return a.held->batch.host().index; }, "the batch's index in its epoch")
      .def_property_readonly("indices", [](const Array& a) { return a.held->batch.host().indices; },
                             "the dataset index of each sample")
      .def(
          "record_stream",
          [](const Array& a, const py::object& stream) {
            if (!a.on_cuda()) {
              throw py::value_error("record_stream: this Array is in host memory, which has no CUDA stream to record "
                                    "(only a cuda Array takes one)");
            }
            a.held->batch.record_stream(reinterpret_cast<void*>(std::uintptr_t(whole("stream", stream))));
          },
          "stream"_a,
          "the batch is also used on this CUDA stream (torch: s.cuda_stream): its release waits for that "
          "stream's work too, as Tensor.record_stream; a ValueError for a host Array")
      .def("__len__", [](const Array& a) { return a.held->batch.size(); })
      .def("__getitem__", [](const Array& a, const py::object& key) {
             const py::object view = as_numpy(a);  // alive until the item is taken
             return py::object(view[key]);
           },
           "a NumPy view of this host Array, indexed (a[0]: the first sample)")
      .def("__iter__", [](const Array& a) { return py::iter(as_numpy(a)); }, "the samples, as NumPy views")
      .def("__repr__", [](const Array& a) {
        std::string s = "conveyor.Array(shape=(";
        const auto shape = a.shape();
        for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
        return s + (shape.size() == 1 ? ",), dtype=" : "), dtype=") + dtype_name(a.element()) + ", epoch=" + std::to_string(a.held->batch.host().epoch) +
               ", index=" + std::to_string(a.held->batch.host().index) + ")";
      });
  py::class_<HostArray, Array>(m, "HostArray", py::buffer_protocol(), "an Array in host memory: also a NumPy buffer")
      .def_buffer([](HostArray& a) { return to_buffer(a); });
}


}  // namespace conveyor::python
