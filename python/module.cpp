// conveyor._conveyor: the pybind11 layer over python/loader.h. It converts
// arguments (python/arguments.h checks each; defaults from the C++ Config and
// ImageConfig: one source of truth), releases the GIL while waiting for a
// batch and checks for Ctrl-C every 50 ms, and hands batches to Python
// without a copy: each batch is a pair of Arrays (images, labels) that share
// it (python/batch_arrays.h: DLPack and, on the host, NumPy's buffer
// protocol). The batch goes back to the pipeline when the last Array, NumPy
// view or DLPack tensor over it dies, on whichever thread that is. Workers and
// the transfer thread never touch Python.
// A Loader's settings are read-only once it is made; iterating a closed one
// raises RuntimeError "loader: closed".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "conveyor/version.h"
#include "pipeline/pipeline.h"
#include "python/arguments.h"
#include "python/array_input.h"
#include "python/batch_arrays.h"
#include "python/holders.h"
#include "python/loader.h"
#include "source/source.h"
#include "image/augment.h"

namespace py = pybind11;
using namespace py::literals;

namespace conveyor::python {
namespace {

using namespace std::chrono_literals;

// ------------------------------------------------------------------ batches

// Text that may quote file names (bytes, not always UTF-8) as a Python str:
// a byte that is not UTF-8 comes out as \\xNN, as the command line prints it.
py::str message(std::string_view text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), Py_ssize_t(text.size()), "backslashreplace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// A file or folder name as Python's os functions give it (os.fsdecode:
// surrogateescape), so that os.fsencode(name) gives its bytes back.
py::str file_name(const std::string& name) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(name.data(), Py_ssize_t(name.size()));
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// ------------------------------------------------------------------ loader

// The thread that finalizes the interpreter: set by an atexit callback
// (registered at import), which Python runs on that thread just before it
// marks itself finalizing. 0 until then.
std::atomic<unsigned long> finalizing_thread{0};

// Lets the GIL go for a blocking call, as py::gil_scoped_release does. At
// interpreter exit a daemon thread that takes the GIL back is ended with
// pthread_exit, whose unwinding through pybind11's noexcept frames aborts the
// whole process ("terminate called without an active exception"); such a
// thread parks here instead, and the process ends around it. The finalizing
// thread itself (closing a Loader from a `with` block of a generator left
// open, say) takes the GIL back as usual.
class NoGil {
 public:
  NoGil() : state_(PyEval_SaveThread()) {}
  ~NoGil() {
    while (finalizing() && PyThread_get_thread_ident() != finalizing_thread.load()) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    PyEval_RestoreThread(state_);
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
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
std::atomic<unsigned long> main_thread{0};

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Polled while a pipeline starts (its pools allocated and first touched, the
// GIL let go and the loader's mutex held): whether a Ctrl-C came. It takes the
// GIL for the look, on the main thread alone, and runs no handler there (one
// that used this loader would wait for its mutex): PyOS_InterruptOccurred
// takes the SIGINT and PyErr_SetInterrupt puts it back, for the caller's
// PyErr_CheckSignals once the lock is let go (interrupted_start()).
bool sigint_pending() {
  if (PyThread_get_thread_ident() != main_thread.load(std::memory_order_relaxed) || interpreter_finalizing()) return false;
  const PyGILState_STATE gil = PyGILState_Ensure();
  const bool came = PyOS_InterruptOccurred() != 0;
  if (came) PyErr_SetInterrupt();
  PyGILState_Release(gil);
  return came;
}

// A start abandoned for sigint_pending(), the loader as it was: runs the
// signal's handler, raising what it raises (KeyboardInterrupt); returns when
// the handler raised nothing, for the caller to start again.
void interrupted_start() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

struct PyLoader {
  std::unique_ptr<HeldRows> x;  // before `loader`: released after its threads are joined
  std::unique_ptr<Loader> loader;
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
  py::dict given;  // the constructor's keywords as checked (not arrays=), read back by the properties

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

enum class Try { batch, end, not_yet, slot_held };

// Iterating a closed loader, or one closed while a loop ran on it (from
// another thread, or inside the loop): an error, not an empty epoch.
std::runtime_error closed_error() {
  return std::runtime_error("loader: closed (by close() or the end of its with block); make a new Loader to read again");
}

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
  held->element = L.loader->element();
  held->ready_on = stream;
  return py::make_tuple(wrap(held, false), wrap(held, true));
}

// A dataset digest as state_dict() keeps it: "fnv1a:" and 16 hex digits.
std::string digest_text(std::uint64_t digest) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return std::string("fnv1a:") + hex;
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

constexpr std::array<std::pair<const char*, BackendChoice>, 3> kDevices{
    {{"auto", BackendChoice::automatic}, {"cuda", BackendChoice::cuda}, {"cpu", BackendChoice::host}}};
constexpr std::array<std::pair<const char*, DType>, 3> kNormalizeTypes{
    {{"float32", DType::float32}, {"float16", DType::float16}, {"bfloat16", DType::bfloat16}}};
constexpr std::array<std::pair<const char*, ErrorPolicy>, 2> kErrorPolicies{
    {{"fail", ErrorPolicy::fail}, {"skip", ErrorPolicy::skip}}};

// The Loader's integer arguments, as Python objects until whole() checks them.
struct Counts {
  py::object batch_size, workers, seed, epochs, host_queue, device_queue, device_buffers, rank, world_size;
};

LoaderSettings settings(const Counts& n, bool shuffle, bool drop_last, const std::string& device,
                        std::optional<std::string> normalize) {
  LoaderSettings s;
  Config& c = s.config;
  c.batch_size = whole("batch_size", n.batch_size);
  c.workers = whole("workers", n.workers);
  c.seed = whole("seed", n.seed);
  c.shuffle = shuffle;
  c.drop_last = drop_last;
  c.epochs = whole("epochs", n.epochs);
  // Config's upper limits, checked here so the message names the argument.
  c.host_queue_depth = whole("host_queue", n.host_queue, 1, Config::kMaxQueueDepth);
  c.device_queue_depth = whole("device_queue", n.device_queue, 1, Config::kMaxQueueDepth);
  c.device_buffers = whole("device_buffers", n.device_buffers, 0, Config::kMaxBuffers);
  c.rank = whole("rank", n.rank);
  c.world_size = whole("world_size", n.world_size, 1, Config::kMaxWorldSize);
  std::string kind = device;
  if (kind.rfind("cuda:", 0) == 0) {
    // "cuda:N", N a decimal GPU index (std::stoi took "cuda:1x" as cuda:1).
    const std::string_view digits = std::string_view(kind).substr(5);
    int ordinal = -1;
    const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (digits.empty() || err != std::errc{} || end != digits.data() + digits.size() || ordinal < 0) {
      throw py::value_error("device='" + device + "': expected 'auto', 'cuda', 'cuda:N' (N a GPU index) or 'cpu'");
    }
    s.device.cuda_device = ordinal;
    kind = "cuda";
  }
  s.device.backend = pick("device", kind, kDevices);
  s.interrupted = sigint_pending;  // Ctrl-C while the pools are allocated: raised within 50 ms
  if (normalize) {
    s.normalize = pick("normalize", *normalize, kNormalizeTypes);
  }
  return s;
}

// device=: a str, or a torch.device as its str ("cpu", "cuda", "cuda:1").
std::string device_name(const py::object& v) {
  const py::handle type = py::type::of(v);
  if (py::str(type.attr("__module__")).cast<std::string>() == "torch" && py::str(type.attr("__name__")).cast<std::string>() == "device") {
    return py::str(v);
  }
  return *text("device", v);
}

// gpu_decode=: "off", "auto" or a share in [0, 1]; 0 for off, nullopt for auto.
std::optional<double> gpu_decode_share(const py::object& v) {
  if (py::isinstance<py::str>(v)) {
    const auto s = v.cast<std::string>();
    if (s == "off") return 0.0;
    if (s == "auto") return std::nullopt;
  } else if (!py::isinstance<py::bool_>(v) && (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v))) {
    const double share = v.cast<double>();
    if (share >= 0 && share <= 1) return share;
  }
  throw py::value_error("gpu_decode=" + py::repr(v).cast<std::string>() + ": expected 'off', 'auto' or a share in [0, 1]");
}

std::unique_ptr<PyLoader> make_loader(std::optional<std::string> folder, std::optional<std::string> list,
                                      std::optional<std::string> shards, bool rank_by_shard, UnlistedShards unlisted,
                                      std::optional<py::tuple> arrays,
                                      ImageConfig image, LoaderSettings s) {
  if (rank_by_shard && !shards) throw py::value_error("rank_by_shard=True: needs shards=");
  // A path is a C string below: a NUL would cut it short, to another path.
  for (const auto& [name, path] : {std::pair{"folder", &folder}, std::pair{"list", &list}, std::pair{"shards", &shards}}) {
    if (*path && (*path)->find('\0') != std::string::npos) {
      throw py::value_error(std::string(name) + "=" + py::repr(py::str(**path)).cast<std::string>() + ": a path holds no NUL byte");
    }
    if (*path && (*path)->empty()) throw py::value_error(std::string(name) + "='': an empty path");
  }
  const int given = int(folder.has_value()) + int(list.has_value()) + int(shards.has_value()) + int(arrays.has_value());
  if (given != 1) throw py::value_error("give exactly one dataset: folder=, list=, shards= or arrays=(x, y)");
  auto L = std::make_unique<PyLoader>();
  if (!arrays) {
    using Kind = DatasetSpec::Kind;
    const DatasetSpec spec{folder ? Kind::folder : shards ? Kind::shards : Kind::list, folder ? *folder : shards ? *shards : *list,
                           unlisted, rank_by_shard, folder ? "folder=" : shards ? "shards=" : "list=", "rank_by_shard=True: "};
    Dataset d = open_dataset(spec, s.config);  // with rank_by_shard, this rank's shards; the pipeline then runs as rank 0 of 1
    L->loader = std::make_unique<Loader>(std::move(d), std::move(image), std::move(s));
    return L;
  }
  if (arrays->size() != 2) throw py::value_error("arrays=: expected a pair (x, y)");
  L->x = std::make_unique<HeldRows>((*arrays)[0]);
  ArrayRows rows = L->x->rows();
  rows.labels = labels_of((*arrays)[1], L->x->count());
  L->loader = std::make_unique<Loader>(std::move(rows), std::move(s));
  return L;
}

// augment=: a preset's name, or None for ImageConfig's default (kDefaultAugmentPreset).
AugmentPreset pick_preset(const std::optional<std::string>& augment) {
  if (!augment) return kDefaultAugmentPreset;
  std::string names;
  for (const auto& p : kAugmentPresets) {
    if (p.name == *augment) return p.preset;
    names += (names.empty() ? "" : ", ") + std::string(p.name);
  }
  throw py::value_error("augment=" + *augment + ": expected one of " + names);
}

py::dict stats_dict(const PipelineStats& s) {
  py::dict stages, queues;
  for (const auto& st : s.stages) {
    stages[py::str(st.name)] = py::dict("threads"_a = st.threads, "items"_a = st.items, "busy"_a = st.busy_fraction(),
                                        "blocked"_a = st.blocked_fraction(), "starved"_a = st.starved_fraction(),
                                        "busy_s"_a = st.busy_s, "blocked_s"_a = st.blocked_s, "starved_s"_a = st.starved_s,
                                        "consumer_wait"_a = st.consumer_wait_fraction(),
                                        "consumer_wait_s"_a = st.consumer_wait_s);
  }
  for (const auto& q : s.queues) {
    queues[py::str(q.name)] = py::dict("mean_occupancy"_a = q.stats.mean_occupancy, "high_water"_a = q.stats.high_water,
                                       "producer_blocked_s"_a = q.stats.producer_blocked_s,
                                       "consumer_starved_s"_a = q.stats.consumer_starved_s);
  }
  return py::dict("wall_s"_a = s.wall_s, "batches"_a = s.batches, "samples"_a = s.samples,
                  "samples_skipped"_a = s.samples_skipped, "stages"_a = stages, "queues"_a = queues,
                  "bottleneck"_a = s.stages.empty() ? std::string("no batch taken yet") : s.bottleneck_summary());
}

void bind_loader(py::module_& m) {
  const Config config;
  const ImageConfig image;
  py::class_<EpochIter>(m, "EpochIterator")
      .def("__iter__", [](EpochIter& it) -> EpochIter& { return it; })
      .def("__next__", &next_batch)
      .def_readonly("epoch", &EpochIter::epoch);
  static const std::set<std::string> kLoaderKeywords = {
      "folder", "list", "shards", "arrays", "batch_size", "workers", "crop", "augment", "seed", "shuffle", "drop_last",
      "epochs", "device", "normalize", "host_queue", "device_queue", "device_buffers", "on_error", "rank", "world_size",
      "rank_by_shard", "extra_shards", "gpu_decode", "max_memory_mb", "slot_timeout"};
  py::class_<PyLoader> loader_class(m, "Loader");
  loader_class
      // Every argument is taken as a Python object and checked here, so that a
      // wrong one gets a one-line error naming it, not pybind11's signature dump.
      .def(py::init([](const py::object& folder_arg, const py::object& list_arg, const py::object& shards_arg,
                       const py::object& arrays_arg, py::object batch_size, py::object workers, const py::object& crop,
                       const py::object& augment_arg, py::object seed, const py::object& shuffle_arg,
                       const py::object& drop_last_arg, py::object epochs, const py::object& device_arg,
                       const py::object& normalize_arg, py::object host_queue, py::object device_queue,
                       py::object device_buffers, const py::object& on_error_arg, py::object rank, py::object world_size,
                       const py::object& rank_by_shard_arg, const py::object& extra_shards_arg,
                       const py::object& gpu_decode, const py::object& max_memory_mb,
                       const py::object& slot_timeout) {
             const auto folder = path("folder", folder_arg), list = path("list", list_arg), shards = path("shards", shards_arg);
             const auto arrays = pair("arrays", arrays_arg);
             const auto augment = text("augment", augment_arg, true), normalize = text("normalize", normalize_arg, true);
             const std::string device = device_name(device_arg), on_error = *text("on_error", on_error_arg);
             const bool shuffle = flag("shuffle", shuffle_arg), drop_last = flag("drop_last", drop_last_arg);
             const bool rank_by_shard = flag("rank_by_shard", rank_by_shard_arg);
             const bool extra_shards = flag("extra_shards", extra_shards_arg);
             if (extra_shards && shards_arg.is_none()) throw py::value_error("extra_shards=True: needs shards=");
             ImageConfig ic;
             if (arrays && (!crop.is_none() || augment)) {
               throw py::value_error("crop=, augment=: not for arrays= (its rows are copied as they are)");
             }
             const int side = crop.is_none() ? kDefaultCrop : int(whole("crop", crop, 1, kMaxCrop));
             if (!arrays) ic.transforms = preset_transforms(pick_preset(augment), side);
             ic.on_error = pick("on_error", on_error, kErrorPolicies);
             // rank=/world_size= not given: 0 of 1, with a warning when a launcher
             // (torchrun, mpirun) says otherwise: DataLoader does not shard by
             // itself either, but a loader reading everything on every rank
             // is a silent trap.
             if (world_size.is_none()) {
               const char* env = std::getenv("WORLD_SIZE");
               if (env && *env && std::string_view(env) != "1") {
                 const std::string warning = std::string("conveyor.Loader: WORLD_SIZE=") + env +
                                             " in the environment, but world_size= not given: every rank reads the whole "
                                             "dataset; pass rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE'])";
                 if (PyErr_WarnEx(PyExc_UserWarning, warning.c_str(), 1) != 0) throw py::error_already_set();
               }
               world_size = py::int_(Config{}.world_size);
             }
             if (rank.is_none()) rank = py::int_(Config{}.rank);
             LoaderSettings s = settings({std::move(batch_size), std::move(workers), std::move(seed), std::move(epochs),
                                          std::move(host_queue), std::move(device_queue), std::move(device_buffers),
                                          std::move(rank), std::move(world_size)},
                                         shuffle, drop_last, device, normalize);
             s.gpu_decode = gpu_decode_share(gpu_decode);
             s.max_memory_mb = non_negative("max_memory_mb", max_memory_mb);  // 0: a quarter of physical memory
             if (arrays && s.gpu_decode != 0.0) throw py::value_error("gpu_decode=: not for arrays= (nothing to decode)");
             std::optional<std::chrono::milliseconds> wait;  // None: for ever
             if (!slot_timeout.is_none()) {
               const double seconds = non_negative("slot_timeout", slot_timeout);
               if (seconds <= 0 || seconds > 1e9) throw py::value_error("slot_timeout=" + std::string(py::repr(slot_timeout)) +
                                                                        ": expected seconds > 0 (or None: wait for ever)");
               wait = std::chrono::milliseconds(std::max<std::int64_t>(1, std::int64_t(std::ceil(seconds * 1000))));
             }
             const Config& c = s.config;
             // What each keyword was given, checked (arrays= left out: x is held apart).
             py::dict given("folder"_a = folder_arg, "list"_a = list_arg, "shards"_a = shards_arg,
                            "batch_size"_a = c.batch_size, "workers"_a = c.workers, "crop"_a = crop,
                            "augment"_a = augment_arg, "seed"_a = c.seed, "shuffle"_a = c.shuffle,
                            "drop_last"_a = c.drop_last, "epochs"_a = c.epochs, "normalize"_a = normalize_arg,
                            "host_queue"_a = c.host_queue_depth, "device_queue"_a = c.device_queue_depth,
                            "device_buffers"_a = c.device_buffers, "on_error"_a = on_error, "rank"_a = c.rank,
                            "world_size"_a = c.world_size, "rank_by_shard"_a = rank_by_shard, "extra_shards"_a = extra_shards,
                            "gpu_decode"_a = gpu_decode,
                            "max_memory_mb"_a = s.max_memory_mb, "slot_timeout"_a = slot_timeout);
             auto loader = make_loader(folder, list, shards, rank_by_shard,
                                       extra_shards ? UnlistedShards::read : UnlistedShards::refuse, arrays, std::move(ic),
                                       std::move(s));
             loader->slot_timeout = wait;
             loader->given = std::move(given);
             return loader;
           }),
           py::kw_only(), "folder"_a = py::none(), "list"_a = py::none(), "shards"_a = py::none(), "arrays"_a = py::none(),
           "batch_size"_a = config.batch_size, "workers"_a = config.workers, "crop"_a = py::none(),
           "augment"_a = py::none(), "seed"_a = config.seed, "shuffle"_a = config.shuffle,
           "drop_last"_a = config.drop_last, "epochs"_a = config.epochs,
           "device"_a = name_of(DeviceConfig{}.backend, kDevices), "normalize"_a = py::none(),
           "host_queue"_a = config.host_queue_depth, "device_queue"_a = config.device_queue_depth,
           "device_buffers"_a = config.device_buffers, "on_error"_a = name_of(image.on_error, kErrorPolicies),
           "rank"_a = py::none(), "world_size"_a = py::none(), "rank_by_shard"_a = false, "extra_shards"_a = false,
           "gpu_decode"_a = "off", "max_memory_mb"_a = 0.0, "slot_timeout"_a = 60.0)
      // Tried only when the one above does not match: a positional argument or
      // an unknown keyword. pybind11 would print every overload's signature
      // (and the repr of arrays=, thousands of lines); this names the argument,
      // with the Loader's word for DataLoader's.
      .def(py::init([](const py::args& args, const py::kwargs& kwargs) -> std::unique_ptr<PyLoader> {
        if (!args.empty()) {
          throw py::type_error("Loader() takes keyword arguments only (folder=, list=, shards= or arrays=, then "
                               "batch_size=, ...), not " + std::to_string(args.size()) + " positional");
        }
        static constexpr std::pair<std::string_view, std::string_view> kDataLoader[] = {
            {"num_workers", "workers= (threads)"},
            {"pin_memory", "device=\"cuda\" (its buffers are pinned)"},
            {"prefetch_factor", "host_queue= and device_queue="},
            {"persistent_workers", "nothing: workers always persist"},
            {"dataset", "folder=, list=, shards= or arrays="},
            {"generator", "seed="},
            {"num_replicas", "world_size="},
        };
        for (const auto& [key, value] : kwargs) {
          const std::string name = py::str(key);
          if (kLoaderKeywords.count(name)) continue;
          std::string hint;
          for (const auto& [theirs, ours] : kDataLoader) {
            if (name == theirs) hint = " (DataLoader's " + name + "; here: " + std::string(ours) + ")";
          }
          throw py::type_error("Loader() got an unexpected keyword argument '" + name + "'" + hint);
        }
        throw py::type_error("Loader(): these arguments match no signature");  // not reached: the first would have
      }))
      .def("__len__", [](PyLoader& L) { return L.loader->batches_per_epoch(); })
      .def("__iter__", [](py::object self) { return epoch_iter(self, std::nullopt); })
      .def("epoch", [](py::object self, const py::object& e) {
        const std::uint64_t n = whole("e", e);
        if (n > kMaxEpoch) {
          throw py::value_error("epoch(" + std::to_string(n) + "): epoch " + std::to_string(n) +
                                " is out of range (epochs are 0 to " + std::to_string(kMaxEpoch) + ")");
        }
        return epoch_iter(self, n);
      }, "e"_a)
      .def_property_readonly("current_epoch", [](PyLoader& L) { return L.locked([&](Loader& l) { return L.consumer_state(l).epoch; }); })
      .def_property_readonly("dataset_size", [](PyLoader& L) { return L.loader->dataset_size(); })
      .def_property_readonly("num_classes", [](PyLoader& L) { return L.loader->num_classes(); })
      .def_property_readonly("gpu_share", [](PyLoader& L) { return L.loader->gpu_share(); })
      .def_property_readonly("gpu_decode_note", [](PyLoader& L) { return L.loader->gpu_decode_note(); })
      .def_property_readonly("classes", [](PyLoader& L) {
        py::list out;  // as os.fsdecode gives a folder's name: os.fsencode(name) is its bytes
        for (const std::string& c : L.loader->classes()) out.append(file_name(c));
        return out;
      })
      .def_property_readonly("batch_size", [](PyLoader& L) { return L.loader->config().batch_size; })
      .def_property_readonly("device", [](PyLoader& L) {
        const Device& d = L.loader->device();
        return d.backend() == Backend::cuda ? "cuda:" + std::to_string(d.ordinal()) : std::string("cpu");
      })
      .def_property_readonly("device_description", [](PyLoader& L) { return L.loader->device().describe(); })
      .def("_set_stream_source", [](PyLoader& L, py::object f) { L.stream_source = std::move(f); })
      .def("state_dict", [](PyLoader& L) {
        return py::dict("conveyor_state"_a = L.locked([&](Loader& l) { return L.consumer_state(l).serialize(); }),
                        "dataset"_a = digest_text(L.loader->dataset_digest()));
      })
      .def("load_state_dict", [](PyLoader& L, const py::object& arg) {
        if (!py::isinstance<py::dict>(arg)) {
          throw py::type_error(std::string("load_state_dict: expected a dict (a Loader's state_dict()), not ") +
                               Py_TYPE(arg.ptr())->tp_name);
        }
        const py::dict d = py::reinterpret_borrow<py::dict>(arg);
        if (!d.contains("conveyor_state")) throw py::key_error("load_state_dict: no 'conveyor_state' (not a conveyor.Loader state)");
        // The order depends on the size alone, so a state of another dataset of
        // that size would resume without a word. A state saved before the
        // digest was kept has none, and is taken as before.
        const auto text = [&d](const char* key) {  // a str, or a TypeError naming the key (not pybind11's cast error)
          const py::object v = d[key];
          if (!py::isinstance<py::str>(v)) {
            throw py::type_error(std::string("load_state_dict: '") + key + "' is a " + Py_TYPE(v.ptr())->tp_name +
                                 ", not a str (not a conveyor.Loader state)");
          }
          return v.cast<std::string>();
        };
        const std::string here = digest_text(L.loader->dataset_digest());
        const PipelineState state = PipelineState::parse(text("conveyor_state"));
        if (d.contains("dataset")) {
          if (const std::string there = text("dataset"); there != here) {
            // With the settings that differ too (the size among them), when any do.
            const std::string settings = state.setting_differences(L.locked([](Loader& l) { return l.state(); }));
            throw py::value_error("load_state_dict: the state was taken on another dataset" +
                                  (settings.empty() ? std::string(" of the same size") : std::string()) + " (dataset " +
                                  there + " there, " + here + " here: other files, labels or rows" +
                                  (settings.empty() ? "" : "; and " + settings) + ")");
          }
        }
        L.seek(state);
      })
      .def("stats", [](PyLoader& L) { return stats_dict(L.locked([](Loader& l) { return l.stats(); })); })
      .def("skipped", [](PyLoader& L) {
        py::list out;
        for (const auto& s : L.locked([](Loader& l) { return l.skipped(); })) out.append(py::dict("epoch"_a = s.epoch, "index"_a = s.index, "reason"_a = message(s.reason),
                                                                                            "times"_a = s.times, "last_epoch"_a = s.last_epoch));
        return out;
      })
      .def("close", [](PyLoader& L) { L.close(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyLoader& L, py::args) { L.close(); })
      // Settings are fixed when a loader is made: assigning one would read
      // back changed while the pipeline kept the old value.
      .def("__setattr__", [loader_class](const py::handle& self, const py::str& name, const py::object& value) {
        const std::string n = name;
        const py::object own = py::getattr(loader_class, name, py::none());
        if (kLoaderKeywords.count(n) || py::isinstance(own, py::module_::import("builtins").attr("property"))) {
          throw py::attribute_error("Loader." + n + " is read-only" +
                                    (kLoaderKeywords.count(n) ? ": a loader's settings are fixed when it is made; make a "
                                                                "new one: conveyor.Loader(..., " + n + "=...)"
                                                              : std::string()));
        }
        if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0) throw py::error_already_set();
      });
  for (const char* name : {"folder", "list", "shards", "workers", "crop", "augment", "seed", "shuffle", "drop_last", "epochs",
                           "normalize", "host_queue", "device_queue", "device_buffers", "on_error", "rank", "world_size",
                           "rank_by_shard", "extra_shards", "gpu_decode", "max_memory_mb", "slot_timeout"}) {
    loader_class.def_property_readonly(name, [name](PyLoader& L) { return L.given[name]; }, "as given to the constructor");
  }
}

void bind_errors(py::module_& m) {
  static py::exception<PipelineError> pipeline_error(m, "PipelineError", PyExc_RuntimeError);
  // Messages name files, whose names are bytes and not always UTF-8: each is
  // decoded with message() (pybind11's own translation decodes strictly, and
  // a name like caf\xe9 raised UnicodeDecodeError in place of the error). The
  // types are pybind11's: ValueError for invalid_argument and its kin, ...
  py::register_local_exception_translator([](std::exception_ptr p) {  // this module's, not every module's
    const auto set = [](PyObject* type, const char* what) { PyErr_SetObject(type, message(what).ptr()); };
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PipelineError& e) {
      py::object err = py::handle(pipeline_error.ptr())(message(e.what()));  // an instance, to carry the fields
      err.attr("stage") = e.stage();
      err.attr("epoch") = e.epoch();
      err.attr("sample") = e.sample() == PipelineError::kNoSample ? py::object(py::none()) : py::cast(e.sample());
      err.attr("reason") = message(e.message());
      PyErr_SetObject(pipeline_error.ptr(), err.ptr());
    } catch (const DatasetError& e) {
      set(PyExc_ValueError, e.what());
    } catch (const PoolAllocationError& e) {
      set(PyExc_MemoryError, e.what());
    } catch (const Interrupted& e) {
      // Ctrl-C as a call started the pipeline (epoch(e), load_state_dict()),
      // which left the loader where it was: the signal's handler runs, and
      // what it raises is raised; KeyboardInterrupt if it raises nothing, as
      // the call did not happen.
      if (PyErr_CheckSignals() == 0) set(PyExc_KeyboardInterrupt, e.what());
    } catch (const py::error_already_set&) {
      throw;  // a Python exception already
    } catch (const py::value_error& e) {
      set(PyExc_ValueError, e.what());
    } catch (const py::type_error& e) {
      set(PyExc_TypeError, e.what());
    } catch (const py::builtin_exception&) {
      throw;  // stop_iteration and the rest: pybind11's
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::out_of_range& e) {
      set(PyExc_IndexError, e.what());
    } catch (const std::overflow_error& e) {
      set(PyExc_OverflowError, e.what());
    } catch (const std::invalid_argument& e) {
      set(PyExc_ValueError, e.what());
    } catch (const std::domain_error& e) {
      set(PyExc_ValueError, e.what());
    } catch (const std::length_error& e) {
      set(PyExc_ValueError, e.what());
    } catch (const std::range_error& e) {
      set(PyExc_ValueError, e.what());
    } catch (const std::exception& e) {
      set(PyExc_RuntimeError, e.what());
    }
  });
}

}  // namespace
}  // namespace conveyor::python

PYBIND11_MODULE(_conveyor, m) {
  ::pthread_atfork(nullptr, nullptr, [] { conveyor::python::forks_as_child.fetch_add(1, std::memory_order_relaxed); });
  m.doc() = "Conveyor's pipeline: decode and augment on worker threads, transfer on its own thread, zero-copy batches";
  m.attr("__version__") = CONVEYOR_VERSION_STRING;
  conveyor::python::bind_errors(m);
  // Which thread finalizes the interpreter (NoGil lets it take the GIL back).
  py::module_::import("atexit").attr("register")(py::cpp_function(
      [] { conveyor::python::finalizing_thread.store(PyThread_get_thread_ident()); }));
  conveyor::python::main_thread.store(
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>());
  conveyor::python::bind_arrays(m);
  conveyor::python::bind_loader(m);
}
