#include "python/iteration.h"

#include <cstdio>
#include <utility>

namespace conveyor::python {

using namespace std::chrono_literals;

std::atomic<unsigned long> finalizing_thread{0};
std::atomic<unsigned long> main_thread{0};

namespace {

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

enum class Try { batch, end, not_yet, slot_held };

// A next() call waiting for another thread to give a slot back: since when
// (slot_timeout counts from there; {}: not waiting), the releases it has seen
// (a release to any thread starts the wait again), and who held what.
struct SlotWait {
  Clock::time_point since{};
  std::uint64_t releases = 0;
  Holders::Count holders;
};

// This thread counts as inside next() from its start until it takes a batch
// (Holders::took ends it), returns or raises; left() early, under the
// loader's mutex, before it raises for a full pool, so that another thread
// waiting there sees it gone at once.
struct InNext {
  Holders& h;
  bool out = false;
  explicit InNext(Holders& holders) : h(holders) { h.enter(thread_serial()); }
  ~InNext() { left(); }
  void left() {
    if (!out) h.leave(thread_serial());
    out = true;
  }
  InNext(const InNext&) = delete;
  InNext& operator=(const InNext&) = delete;
};

// The RuntimeError of a full pool: who holds its slots, and why none will
// come back (`waited`: after slot_timeout's wait; else nobody can give one).
std::runtime_error full_pool(const Loader& l, const Holders::Count& n, std::optional<std::chrono::milliseconds> waited) {
  std::string who = std::to_string(n.mine) + " taken by this thread";
  if (n.waiting > 0) {
    who += ", " + std::to_string(n.waiting) + " by " + std::to_string(n.waiting_threads) +
           " other thread(s) now waiting in next() too";
  }
  if (n.ended > 0) who += ", " + std::to_string(n.ended) + " by threads that have ended (batches handed on)";
  if (n.running > 0) {
    who += ", " + std::to_string(n.running) + " by " + std::to_string(n.running_threads) + " other thread(s)";
  }
  char seconds[32] = "";
  if (waited) std::snprintf(seconds, sizeof seconds, "%g", double(waited->count()) / 1000);
  who += waited ? std::string("; none came back in ") + seconds + " s (slot_timeout=)" : ", so none can come back";
  return std::runtime_error("Loader: all " + std::to_string(l.device_slots()) + " device slots are held by batches still alive (" +
                            who + "); release a batch before taking another (or raise device_buffers: threads that share "
                            "a loader need device_queue + 2 * threads)");
}

// One try at the next batch of it.epoch, under the loader's mutex: checking
// and taking in one critical section, so two Python threads on one loader
// cannot both see "ready" and one then block in next() holding it. A
// held-back batch comes first.
Try try_next(PyLoader& L, Loader& l, const EpochIter& it, void* stream, std::optional<DeviceBatch>& out, InNext& in_next,
             SlotWait& wait) {
  const std::uint64_t epoch = it.epoch;
  if (l.closed()) throw closed_error();
  if (it.generation != L.generation) return Try::end;  // moved elsewhere meanwhile
  if (L.held_back) {
    if (L.held_back->host().epoch != epoch) return Try::end;
    out = std::move(*L.held_back);
    L.held_back.reset();
    if (stream != L.held_back_stream && out->device().backend() == Backend::cuda) out->use_on(stream);
    L.holders->took(thread_serial());
    in_next.out = true;
    return Try::batch;
  }
  if (l.state().epoch != epoch) return Try::end;
  if (l.every_slot_held()) {
    Holders::Count& n = wait.holders;
    const bool may = L.holders->may_come_back(thread_serial(), n);
    const auto now = Clock::now();
    if (wait.since == Clock::time_point{} || n.releases != wait.releases) {
      wait.since = now;
      wait.releases = n.releases;
    }
    const bool timed_out = L.slot_timeout && now - wait.since >= *L.slot_timeout;
    if (may && !timed_out) return Try::slot_held;
    in_next.left();
    throw full_pool(l, n, timed_out ? L.slot_timeout : std::nullopt);
  }
  if (!l.wait_ready(0ms)) return Try::not_yet;
  out = l.next(stream);
  if (!out) return Try::end;
  // Counted while the loader's mutex is held: a thread that finds every slot
  // held next sees this one's batch, and this thread as on its way out.
  L.holders->took(thread_serial());
  in_next.out = true;
  return Try::batch;
}

}  // namespace

py::object next_batch(EpochIter& it) {
  PyLoader& L = *it.loader;
  if (it.generation != L.generation) throw py::stop_iteration();  // the loader moved elsewhere
  L.check_process();  // before anything locks: a forked child may hold copies of locked mutexes
  void* stream = nullptr;
  if (!L.stream_source.is_none()) stream = reinterpret_cast<void*>(L.stream_source().cast<std::intptr_t>());
  std::optional<DeviceBatch> batch;
  auto held = std::make_shared<Held>();  // before the take: no allocation fails after it
  // Take a batch only when it is ready now; wait (up to 50 ms at a time)
  // without taking, and raise a signal's exception (Ctrl-C: KeyboardInterrupt)
  // between waits. A signal that came while the GIL was let go for the take
  // is raised too, with the batch held back for the next call: a batch taken
  // and then dropped for KeyboardInterrupt would be missing from the epoch,
  // and counted as delivered by state_dict(). From here to the return the GIL
  // is held, so no Python thread of this process can signal in between.
  InNext in_next(*L.holders);
  SlotWait wait;
  for (;;) {
    Try t;
    try {
      t = L.locked([&](Loader& l) { return try_next(L, l, it, stream, batch, in_next, wait); });
    } catch (const Interrupted&) {  // Ctrl-C as the pipeline started: nothing taken
      interrupted_start();
      continue;
    }
    if (t == Try::slot_held) {  // another thread's batch will come back: wait for it, Ctrl-C between waits
      // Batches an ended thread handed on come back only if some other
      // thread is left to drop them.
      if (wait.holders.running == 0 && py::module_::import("threading").attr("active_count")().cast<int>() <= 1) {
        in_next.left();
        throw full_pool(*L.loader, wait.holders, std::nullopt);
      }
      {
        NoGil nogil;
        L.holders->wait(50ms);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      continue;
    }
    if (t == Try::end) throw py::stop_iteration();
    if (t == Try::batch) {
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set raised;  // fetched before the lock lets the GIL go
        L.locked([&](Loader&) {
          if (it.generation != L.generation) return;  // moved meanwhile: the batch is not the next one any more
          L.held_back = std::make_unique<DeviceBatch>(std::move(*batch));
          L.held_back_stream = stream;
        });
        batch.reset();  // dropped if not held back: its slot first, then the count
        L.holders->released(thread_serial());  // held back, the loader's now; or dropped
        throw raised;
      }
      break;
    }
    wait = {};  // a slot came back meanwhile
    try {
      L.locked([](Loader& l) { return l.wait_ready(50ms); });
    } catch (const Interrupted&) {
      interrupted_start();
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // the loader intact
  }
  held->count.holders = L.holders;  // took() counted it; ~Held gives it back
  held->batch = std::move(*batch);
  held->sample_shape = L.loader->sample_shape();
  held->views = L.loader->views();
  held->element = L.loader->element();
  held->ready_on = stream;
  // views=: (views, labels), views a tuple with one array per view.
  if (!held->views.empty()) {
    py::tuple views(held->views.size());
    for (std::size_t k = 0; k < held->views.size(); ++k) views[k] = wrap(held, Part::images, int(k));
    return py::make_tuple(views, wrap(held, Part::labels));
  }
  // MixUp and CutMix: (images, soft labels), or with mix_labels="pair"
  // (images, labels, lambda), the labels paired as labels.roll(1, 0).
  if (L.mix_pair) {
    const double lambda = held->batch.extras().value(kMixLambda).value_or(1.0);
    return py::make_tuple(wrap(held, Part::images), wrap(held, Part::labels), py::float_(lambda));
  }
  if (held->batch.extras().tensor(kSoftLabels)) return py::make_tuple(wrap(held, Part::images), wrap(held, Part::soft_labels));
  return py::make_tuple(wrap(held, Part::images), wrap(held, Part::labels));
}

bool sigint_pending() {
  if (PyThread_get_thread_ident() != main_thread.load(std::memory_order_relaxed) || interpreter_finalizing()) return false;
  const PyGILState_STATE gil = PyGILState_Ensure();
  const bool came = PyOS_InterruptOccurred() != 0;
  if (came) PyErr_SetInterrupt();
  PyGILState_Release(gil);
  return came;
}

void interrupted_start() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

std::runtime_error closed_error() {
  return std::runtime_error("loader: closed (by close() or the end of its with block); make a new Loader to read again");
}

EpochIter epoch_iter(py::object self, std::optional<std::uint64_t> e) {
  auto& L = self.cast<PyLoader&>();
  const PipelineState now = L.locked([&](Loader& l) {
    if (l.closed()) throw closed_error();
    return L.consumer_state(l);
  });
  if (e && *e != now.epoch) {
    PipelineState s = now;
    s.epoch = *e;
    s.delivered.clear();
    L.seek(s);
  }
  return EpochIter{&L, self, e ? *e : now.epoch, L.generation};
}


}  // namespace conveyor::python
