// Iteration: how Python threads take batches from a Loader, and the policy
// that keeps them safe: the GIL let go while a thread waits (NoGil), one
// consumer call at a time under the loader's mutex (PyLoader::locked), Ctrl-C
// checked every 50 ms and raised without losing a batch (a batch taken as a
// signal came is held back for the next call), slots held by other threads
// waited for up to slot_timeout, a loader used after fork() refused, and a
// closed loader's iteration an error, not an empty epoch.
//
// Thread safety: every PyLoader member is touched under `mu` (or before the
// loader is shared); the functions here are called with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include <sys/types.h>
#include <unistd.h>

#ifdef __GLIBCXX__
#include <cxxabi.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "data/remote/streaming_shards.h"
#include "python/array_input.h"
#include "python/batch_arrays.h"
#include "python/holders.h"
#include "python/loader.h"

namespace conveyor::python {

namespace py = pybind11;

// The thread that finalizes the interpreter: set by an atexit callback
// (registered at import), which Python runs on that thread just before it
// marks itself finalizing. 0 until then.
extern std::atomic<unsigned long> finalizing_thread;

// Lets the GIL go for a blocking call, as py::gil_scoped_release does. At
// interpreter exit a daemon thread that takes the GIL back is ended with
// pthread_exit, whose unwinding through this destructor (noexcept, as every
// destructor) would abort the whole process ("terminate called without an
// active exception"). Such a thread parks instead, and the process ends
// around it: before asking for the GIL when the interpreter is finalizing
// already, and when it started finalizing while the thread waited for the GIL
// (the unwinding is caught here and never finishes, as Python 3.14 itself
// parks such threads). The finalizing thread itself (closing a Loader from a
// `with` block of a generator left open, say) takes the GIL back as usual.
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  ~NoGil() {
    while (finalizing() && PyThread_get_thread_ident() != finalizing_thread.load()) park();
#ifdef __GLIBCXX__
    try {
      PyEval_RestoreThread(state_);
    } catch (abi::__forced_unwind&) {  // pthread_exit from inside: never rethrown, so never resumed
      for (;;) park();
    }
#else
    PyEval_RestoreThread(state_);
#endif
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  static void park() { std::this_thread::sleep_for(std::chrono::seconds(1)); }
  static bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
  }
  PyThreadState* state_;
};

// The main thread's id (only it runs Python's signal handlers); set at import.
extern std::atomic<unsigned long> main_thread;

// Polled while a pipeline starts (its pools allocated and first touched, the
// GIL let go and the loader's mutex held): whether a Ctrl-C came. It takes the
// GIL for the look, on the main thread alone, and runs no handler there (one
// that used this loader would wait for its mutex): PyOS_InterruptOccurred
// takes the SIGINT and PyErr_SetInterrupt puts it back, for the caller's
// PyErr_CheckSignals once the lock is let go (interrupted_start()).
bool sigint_pending();

// A start abandoned for sigint_pending(), the loader as it was: runs the
// signal's handler, raising what it raises (KeyboardInterrupt); returns when
// the handler raised nothing, for the caller to start again.
void interrupted_start();

struct PyLoader {
  std::unique_ptr<HeldRows> x;  // before `loader`: released after its threads are joined
  std::unique_ptr<Loader> loader;
  // Shards read while they download (data/remote/streaming_shards.h): their
  // counters in stats()["remote"]; null for any other dataset.
  std::shared_ptr<const StreamingShards> remote;
  std::mutex mu;                  // one consumer call at a time; taken with the GIL released
  // Bumped under `mu` by every move (epoch(), load_state_dict): older iterators end.
  std::atomic<std::uint64_t> generation{0};
  py::object stream_source = py::none();  // returns the CUDA stream to make each batch ready on
  // The process whose threads the loader runs. fork() copies the loader but
  // not its threads (nor, perhaps, an unlocked `mu`): a child may use a loader
  // that had not started yet, and is refused one that had.
  pid_t pid = ::getpid();  // for the message
  std::uint64_t forks = forks_as_child.load(std::memory_order_relaxed);
  // A batch taken from the pipeline as a signal came in: the signal's
  // exception (KeyboardInterrupt) was raised instead, and this batch is the
  // next one given, on the stream it was made ready on (held_back_stream).
  // The consumer's position (consumer_state) leaves it out. Dropped by a move
  // (epoch(), load_state_dict) and by close(). Guarded by `mu`.
  std::unique_ptr<DeviceBatch> held_back;
  void* held_back_stream = nullptr;
  std::shared_ptr<Holders> holders = std::make_shared<Holders>();
  // slot_timeout=: how long next() waits for another thread to give a slot
  // back when every one is held; nullopt: for ever.
  std::optional<std::chrono::milliseconds> slot_timeout = std::chrono::seconds(60);
  py::dict given;  // the constructor's keywords as checked, by name: what the properties read back
  // mix_labels="pair": batches are (images, labels, lambda) rather than
  // (images, soft labels) when the transforms end with MixUp or CutMix.
  bool mix_pair = false;

  PyLoader() = default;
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;
  ~PyLoader() {
    // In a forked child the threads to join live in the parent: joining (or
    // locking) here would hang or crash. The child's copy is left to the OS.
    if (loader && forks_as_child.load(std::memory_order_relaxed) != forks && loader->running()) {
      (void)held_back.release();  // its release would go to the parent's pipeline
      (void)loader.release();
    }
  }

  // Runs f under the loader's mutex with the GIL released.
  template <typename F>
  auto locked(F f) {
    check_process();
    NoGil nogil;
    std::lock_guard lk(mu);
    return f(*loader);
  }
  // Throws a one-line RuntimeError in a child forked after the loader started.
  void check_process() {
    const std::uint64_t now_forks = forks_as_child.load(std::memory_order_relaxed);
    if (now_forks == forks) return;
    const pid_t now = ::getpid();
    if (loader->running()) {
      throw std::runtime_error("Loader: made and started in process " + std::to_string(pid) +
                               ", used in process " + std::to_string(now) +
                               " after fork(): its threads stayed in the parent; make a new Loader in the child");
    }
    pid = now;  // never started: the child's copy is its own
    forks = now_forks;
  }
  // close() and the with-block's exit: the held-back batch and the threads.
  void close() {
    locked([&](Loader& l) {
      held_back.reset();
      l.close();
    });
  }
  void seek(const PipelineState& s) {
    locked([&](Loader& l) {
      held_back.reset();
      l.seek(s);
      ++generation;
    });
  }
  // Where the consumer stands: the loader's position, less a held-back batch
  // (the last of its epoch, it moved the loader on to the next). Under `mu`.
  PipelineState consumer_state(const Loader& l) const {
    PipelineState s = l.state();
    if (!held_back) return s;
    const Batch& b = held_back->host();
    if (s.epoch != b.epoch) {
      s.epoch = b.epoch;
      s.delivered.clear();
      for (std::uint64_t i = 0; i < l.batches_per_epoch(); ++i) s.delivered.push_back(i);
    }
    std::erase(s.delivered, b.index);
    return s;
  }
};

struct EpochIter {
  PyLoader* loader;
  py::object keep;  // the Python Loader, alive while iterating
  std::uint64_t epoch, generation;
};

// Iterating a closed loader, or one closed while a loop ran on it (from
// another thread, or inside the loop): an error, not an empty epoch.
std::runtime_error closed_error();

// The iterator's __next__: the next batch of it.epoch as a pair of Arrays
// (images, labels), or StopIteration at the epoch's end or when the loader
// moved elsewhere (epoch(), load_state_dict()) meanwhile.
py::object next_batch(EpochIter& it);

// An iterator over epoch `e` (the consumer's epoch when nullopt), moving the
// loader there first when it stands elsewhere. Throws closed_error() for a
// closed loader.
EpochIter epoch_iter(py::object self, std::optional<std::uint64_t> e);

}  // namespace conveyor::python
