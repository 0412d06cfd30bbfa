// The batches Python holds: one Held per batch taken, shared by its two
// Arrays (images, labels or soft labels), the NumPy views and the DLPack exports over them;
// the batch goes back to its pipeline when the last of those dies, on
// whichever thread that is. bind_arrays() makes conveyor.Array and
// conveyor.HostArray: DLPack (__dlpack__ as the array API standard 2023.12
// has it, __dlpack_device__), NumPy's buffer protocol on the host, and
// indexing and iteration through a NumPy view.
//
// DLPack: the legacy unversioned "dltensor" capsule (DLPack 0.6 from Debian's
// libdlpack-dev), which PyTorch >= 1.10, NumPy >= 1.22 and CuPy all take;
// bool rows are DLPack 0.8's kDLBool (6), which older consumers refuse.
//
// Thread safety: Python's (the GIL) for every call here; a Held may die on
// any thread.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/mix_step.h"
#include "python/holders.h"
#include "python/loader.h"

namespace conveyor::python {

namespace py = pybind11;

// One batch as Python holds it; Arrays and DLPack exports share it.
// Forks this process has come out of as the child: bumped by a
// pthread_atfork child handler (registered at import), so that "am I the
// process that made this?" is an atomic load per batch, not a getpid() call.
inline std::atomic<std::uint64_t> forks_as_child{0};

// The taker's count of one batch, given back after the batch (declared
// before it in Held, so destroyed after it: the slot is free by then).
struct HoldCount {
  std::shared_ptr<Holders> holders;
  std::uint64_t taker = thread_serial();
  std::uint64_t forks = forks_as_child.load(std::memory_order_relaxed);
  HoldCount() = default;
  HoldCount(const HoldCount&) = delete;
  HoldCount& operator=(const HoldCount&) = delete;
  ~HoldCount() {
    // In a forked child the mutex may have been copied locked: left alone.
    if (holders && forks_as_child.load(std::memory_order_relaxed) == forks) holders->released(taker);
  }
};

struct Held {
  HoldCount count;  // first: given back after `batch` has freed its slot
  DeviceBatch batch;
  std::vector<std::int64_t> sample_shape;
  std::vector<ViewLayout> views;  // views=: where each view lies in a sample
  Element element;
  void* ready_on = nullptr;  // CUDA: the stream next() made the batch ready on
  std::uint64_t forks = forks_as_child.load(std::memory_order_relaxed);  // of the process whose pipeline it goes back to

  Held() = default;
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ~Held() {
    // A batch dropped in a forked child: its pipeline's threads (and perhaps
    // a lock one of them held at the fork) stayed in the parent, so it is
    // left to the OS rather than released into the child's copy.
    if (forks_as_child.load(std::memory_order_relaxed) != forks) (void)new DeviceBatch(std::move(batch));
  }
};

// The strides, in elements, of a C-order array of `shape`.
inline std::vector<std::int64_t> c_order_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> st(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  return st;
}

// Which tensor of a batch an Array is.
enum class Part : std::uint8_t {
  images,
  labels,       // int64 [N]
  soft_labels,  // float32 [N, classes]: MixUp's and CutMix's (device/mix_step.h)
};

// images, labels or soft labels of one batch; with views=, one view of the
// images: [N, H, W, 3] uint8 inside each sample, so its rows are a sample
// apart, or with normalize= a dense [N, 3, H, W] tensor of its own.
struct Array {
  std::shared_ptr<Held> held;
  Part part = Part::images;
  int view = -1;  // Part::images with views=: which one

  // views= with normalize=: the view is a dense tensor of its own (DeviceBatch::view_data).
  bool dense_view() const { return view >= 0 && held->batch.dtype() != DType::uint8; }

  // The batch's soft labels (the Mix step's); null without.
  const BatchTensor* soft() const { return held->batch.extras().tensor(kSoftLabels); }
  void* data() const {
    switch (part) {
      case Part::labels: return const_cast<std::int64_t*>(held->batch.labels());
      case Part::soft_labels: return soft()->data;
      case Part::images: break;
    }
    if (dense_view()) return held->batch.view_data(std::size_t(view));
    if (view >= 0) return static_cast<std::byte*>(held->batch.data()) + held->views.at(std::size_t(view)).offset;
    return held->batch.data();
  }
  Element element() const {
    switch (part) {
      case Part::labels: return Element{'i', 64};
      case Part::soft_labels: return Element{'f', 32};
      case Part::images: break;
    }
    return held->element;
  }
  std::vector<std::int64_t> shape() const {
    if (part == Part::soft_labels) return soft()->shape;
    if (dense_view()) return held->batch.view_shape(std::size_t(view));
    std::vector<std::int64_t> s{std::int64_t(held->batch.size())};
    if (view >= 0) {
      const Size out = held->views.at(std::size_t(view)).out;
      s.insert(s.end(), {out.height, out.width, 3});
    } else if (part == Part::images) {
      s.insert(s.end(), held->sample_shape.begin(), held->sample_shape.end());
    }
    return s;
  }
  // Elements between neighbours along each axis: C order, but a uint8 view's
  // rows (samples) are a whole sample apart.
  std::vector<std::int64_t> strides() const {
    std::vector<std::int64_t> st = c_order_strides(shape());
    if (view >= 0 && !dense_view()) st[0] = std::int64_t(held->batch.host().sample_bytes);  // uint8: bytes are elements
    return st;
  }
  bool on_cuda() const { return held->batch.device().backend() == Backend::cuda; }
};

// An Array on the host whose dtype has a buffer format: NumPy views it in place.
struct HostArray : Array {};

// One part of `held` as a Python object: a HostArray where NumPy can view
// it, else an Array. Part::soft_labels only for a batch that has them.
py::object wrap(std::shared_ptr<Held> held, Part part, int view = -1);

// Adds conveyor.Array and conveyor.HostArray to m.
void bind_arrays(py::module_& m);

}  // namespace conveyor::python
