// conveyor._conveyor: the pybind11 bindings over python/loader.h. Each
// argument is checked where it is converted (python/arguments.h; defaults from
// the C++ Config and ImageConfig: one source of truth), the dataset comes from
// source/source.h as the command's does, and batches reach Python without a
// copy as pairs of Arrays (python/batch_arrays.h: DLPack and, on the host,
// NumPy's buffer protocol). How threads take batches (the GIL, Ctrl-C, slots
// held by other threads, fork) is python/iteration.h. Workers and the delivery
// thread never touch Python. A Loader's settings are read-only once it is
// made; iterating a closed one raises RuntimeError "loader: closed".
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "conveyor/version.h"
#include "pipeline/fnv1a.h"
#include "pipeline/pipeline.h"
#include "python/arguments.h"
#include "python/array_input.h"
#include "python/batch_arrays.h"
#include "python/holders.h"
#include "python/iteration.h"
#include "python/loader.h"
#include "source/source.h"
#include "image/augment.h"
#include "image/transform_spec.h"

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

// A dataset digest as state_dict() keeps it: "fnv1a:" and 16 hex digits.
std::string digest_text(std::uint64_t digest) {
  std::string out = "fnv1a:";
  return out += hex16(digest);
}

constexpr std::array<std::pair<const char*, BackendChoice>, 3> kDevices{
    {{"auto", BackendChoice::automatic}, {"cuda", BackendChoice::cuda}, {"cpu", BackendChoice::host}}};
constexpr std::array<std::pair<const char*, DType>, 3> kNormalizeTypes{
    {{"float32", DType::float32}, {"float16", DType::float16}, {"bfloat16", DType::bfloat16}}};
constexpr std::array<std::pair<const char*, ErrorPolicy>, 2> kErrorPolicies{
    {{"fail", ErrorPolicy::fail}, {"skip", ErrorPolicy::skip}}};

// The Loader's integer arguments, as Python objects until whole() checks them.
struct Counts {
  py::object batch_size, workers, seed, epochs, host_queue, device_queue, device_buffers, rank, world_size, max_workers,
      max_host_queue, max_device_queue;
};

// An argument that takes a whole number or "auto": `name`= a number in
// lo .. hi, or "auto", tuned then up to `ceiling_name`= (1 .. ceiling_hi;
// `fallback` when None), which is refused without "auto". `expected` says
// what the number is in the error ("a count of threads").
struct CountOrAuto {
  const char *name, *ceiling_name, *expected;
  std::uint64_t lo, hi, ceiling_hi, fallback;
};

// The number (the ceiling under "auto") and whether it was "auto".
std::pair<std::uint64_t, bool> count_or_auto(const CountOrAuto& a, const py::object& v, const py::object& ceiling) {
  const std::string name = a.name, ceiling_name = a.ceiling_name;
  if (!py::isinstance<py::str>(v)) {
    const std::uint64_t n = whole(a.name, v, a.lo, a.hi);
    if (!ceiling.is_none()) throw py::value_error(ceiling_name + "=: only with " + name + "='auto'");
    return {n, false};
  }
  if (v.cast<std::string>() != "auto") {
    throw py::value_error(name + "=" + std::string(py::repr(v)) + ": expected " + a.expected + " or 'auto'");
  }
  return {ceiling.is_none() ? a.fallback : whole(a.ceiling_name, ceiling, 1, a.ceiling_hi), true};
}

LoaderSettings settings(const Counts& n, bool shuffle, bool drop_last, const std::string& device,
                        std::optional<std::string> normalize) {
  LoaderSettings s;
  Config& c = s.config;
  c.batch_size = whole("batch_size", n.batch_size);
  // workers="auto": Config::tune_workers, up to max_workers= threads.
  std::tie(c.workers, c.tune_workers) =
      count_or_auto({"workers", "max_workers", "a count of threads", 0, std::numeric_limits<std::uint64_t>::max(),
                     Config::kMaxWorkers, default_worker_ceiling()},
                    n.workers, n.max_workers);
  c.seed = whole("seed", n.seed);
  c.shuffle = shuffle;
  c.drop_last = drop_last;
  c.epochs = whole("epochs", n.epochs);
  // Config's upper limits, checked here so the message names the argument.
  // host_queue="auto": Config::tune_host_queue, up to max_host_queue= batches deep.
  std::tie(c.host_queue_depth, c.tune_host_queue) =
      count_or_auto({"host_queue", "max_host_queue", "a depth in batches", 1, Config::kMaxQueueDepth,
                     Config::kMaxQueueDepth, kDefaultHostQueueCeiling},
                    n.host_queue, n.max_host_queue);
  // device_queue="auto": Config::tune_device_queue, up to max_device_queue= batches deep.
  std::tie(c.device_queue_depth, c.tune_device_queue) =
      count_or_auto({"device_queue", "max_device_queue", "a depth in batches", 1, Config::kMaxQueueDepth,
                     Config::kMaxQueueDepth, kDefaultDeviceQueueCeiling},
                    n.device_queue, n.max_device_queue);
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
                                      RemoteOptions remote,
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
                           unlisted, rank_by_shard, folder ? "folder=" : shards ? "shards=" : "list=", "rank_by_shard=True: ",
                           std::move(remote)};
    Dataset d = open_dataset(spec, s.config);  // with rank_by_shard, this rank's shards; the pipeline then runs as rank 0 of 1
    L->remote = std::dynamic_pointer_cast<const StreamingShards>(d.files());
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
    py::dict parts;
    for (const auto& p : st.parts) parts[py::str(p.name)] = py::dict("seconds"_a = p.seconds, "calls"_a = p.calls);
    stages[py::str(st.name)] = py::dict("threads"_a = st.threads, "items"_a = st.items, "busy"_a = st.busy_fraction(),
                                        "blocked"_a = st.blocked_fraction(), "starved"_a = st.starved_fraction(),
                                        "busy_s"_a = st.busy_s, "blocked_s"_a = st.blocked_s, "starved_s"_a = st.starved_s,
                                        "consumer_wait"_a = st.consumer_wait_fraction(),
                                        "consumer_wait_s"_a = st.consumer_wait_s, "parts"_a = parts);
  }
  for (const auto& q : s.queues) {
    queues[py::str(q.name)] = py::dict("mean_occupancy"_a = q.stats.mean_occupancy, "high_water"_a = q.stats.high_water,
                                       "producer_blocked_s"_a = q.stats.producer_blocked_s,
                                       "consumer_starved_s"_a = q.stats.consumer_starved_s);
  }
  const auto decisions = [](const std::vector<TuneDecision>& list) {
    py::list out;
    for (const TuneDecision& d : list) {
      out.append(py::dict("at_s"_a = d.at_s, "from"_a = d.from, "to"_a = d.to, "images_per_s"_a = d.images_per_s,
                          "reason"_a = d.reason));
    }
    return out;
  };
  py::object tuned = py::none();  // workers="auto": the count working now and the tuner's changes
  if (s.workers_active > 0) {
    tuned = py::dict("working"_a = s.workers_active, "changes"_a = s.tune_changes, "decisions"_a = decisions(s.tuning));
  }
  // host_queue="auto", device_queue="auto": the depth now, its ceiling and the changes.
  const auto queue_tuned = [&](const PipelineStats::QueueTuning& q) -> py::object {
    if (q.depth == 0) return py::none();
    return py::dict("depth"_a = q.depth, "ceiling"_a = q.ceiling, "changes"_a = q.changes,
                    "decisions"_a = decisions(q.decisions));
  };
  return py::dict("wall_s"_a = s.wall_s, "batches"_a = s.batches, "samples"_a = s.samples,
                  "samples_skipped"_a = s.samples_skipped, "stages"_a = stages, "queues"_a = queues,
                  "tune_workers"_a = tuned, "tune_host_queue"_a = queue_tuned(s.host_queue_tuning),
                  "tune_device_queue"_a = queue_tuned(s.device_queue_tuning),
                  "bottleneck"_a = s.stages.empty() ? std::string("no batch taken yet") : s.bottleneck_summary());
}

// transforms=: None, the list as text, or a sequence of conveyor.transforms
// objects (or their text), joined into the text parse_transforms reads.
std::optional<std::string> transform_text(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(v)) return text("transforms", v);
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) {
    throw py::type_error(std::string("transforms=: expected a list of conveyor.transforms objects or their text, not ") +
                         Py_TYPE(v.ptr())->tp_name);
  }
  const py::object kind = py::module_::import("conveyor.transforms").attr("Transform");
  std::string out;
  std::size_t at = 0;
  for (const py::handle item : v) {
    if (!py::isinstance<py::str>(item) && !py::isinstance(item, kind)) {
      throw py::type_error("transforms=: item " + std::to_string(at) + " is a " + Py_TYPE(item.ptr())->tp_name +
                           "; give conveyor.transforms objects (torchvision's names and parameters) or their text");
    }
    if (at++ > 0) out += ", ";
    out += py::str(item).cast<std::string>();
  }
  if (at == 0) throw py::value_error("transforms=[]: an empty list (leave transforms= out for the default)");
  return out;
}

// views=: None, the text parse_views reads ("2: LIST; 6: LIST"), or a
// sequence of (count, transforms) pairs, each transforms as transforms= takes
// it, joined into that text.
std::optional<std::string> views_text(const py::object& v) {
  if (v.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(v)) return text("views", v);
  const auto wrong = [&](const std::string& what) {
    return py::type_error("views=: " + what + "; give (count, transforms) pairs, e.g. [(2, [T.RandomResizedCrop(224)]), "
                          "(6, [T.RandomResizedCrop(96)])], or their text");
  };
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) throw wrong(std::string("a ") + Py_TYPE(v.ptr())->tp_name);
  std::string out;
  std::size_t at = 0;
  for (const py::handle item : v) {
    const std::string entry = "entry " + std::to_string(at + 1);  // from 1, as parse_views counts
    if ((!py::isinstance<py::tuple>(item) && !py::isinstance<py::list>(item)) || py::len(item) != 2) {
      throw wrong(entry + " is not a (count, transforms) pair");
    }
    const py::object count = item[py::int_(0)], list = item[py::int_(1)];
    if (!py::isinstance<py::int_>(count) || py::isinstance<py::bool_>(count)) throw wrong(entry + "'s count is not an int");
    std::string chain;
    try {
      chain = transform_text(py::reinterpret_borrow<py::object>(list)).value_or("");
    } catch (const py::type_error& e) {
      throw py::type_error("views=: " + entry + ": " + e.what());
    } catch (const py::value_error& e) {
      throw py::value_error("views=: " + entry + ": " + e.what());
    }
    if (chain.find_first_of(";:") != std::string::npos) {
      throw py::value_error("views=: " + entry + ": its transforms hold ';' or ':', which separate views: give "
                            "one (count, transforms) pair per view");
    }
    if (at++ > 0) out += "; ";
    out += py::str(count).cast<std::string>() + ": " + chain;
  }
  if (at == 0) throw py::value_error("views=[]: an empty list (leave views= out for one view)");
  return out;
}

// The transform list, parsed and checked as a chain (order, sizes): a
// ValueError naming the transform and the parameter, not Augment's RuntimeError.
std::vector<Transform> parse_transform_list(const std::string& text) {
  try {
    std::vector<Transform> chain = parse_transforms(text);
    (void)Augment(chain);
    return chain;
  } catch (const AugmentError& e) {
    throw py::value_error(std::string("transforms=: ") + e.what());
  }
}

// The Loader's keywords, in the constructor's order, each with its default: the
// one list behind the constructor's signature (what help() shows; the stub
// _conveyor.pyi repeats it, and test_stubs.py holds the two together), the
// check that names an unknown keyword, and the read-only properties. A default
// is made when the constructor is bound (a Python object needs the interpreter).
struct LoaderKeyword {
  const char* name;
  py::object (*fallback)();
};

py::object none() { return py::none(); }

constexpr auto kLoaderKeywords = std::to_array<LoaderKeyword>({
    {"folder", none},
    {"list", none},
    {"shards", none},
    {"arrays", none},
    {"batch_size", [] { return py::cast(Config{}.batch_size); }},
    {"workers", [] { return py::cast(Config{}.workers); }},
    {"max_workers", none},  // None: twice the usable cores, with workers="auto"
    {"crop", none},
    {"augment", none},
    {"transforms", none},
    {"views", none},
    {"seed", [] { return py::cast(Config{}.seed); }},
    {"shuffle", [] { return py::cast(Config{}.shuffle); }},
    {"drop_last", [] { return py::cast(Config{}.drop_last); }},
    {"epochs", [] { return py::cast(Config{}.epochs); }},
    {"device", [] { return py::cast(name_of(DeviceConfig{}.backend, kDevices)); }},
    {"normalize", none},
    {"host_queue", [] { return py::cast(Config{}.host_queue_depth); }},
    {"max_host_queue", none},  // None: kDefaultHostQueueCeiling, with host_queue="auto"
    {"device_queue", [] { return py::cast(Config{}.device_queue_depth); }},
    {"max_device_queue", none},  // None: kDefaultDeviceQueueCeiling, with device_queue="auto"
    {"device_buffers", [] { return py::cast(Config{}.device_buffers); }},
    {"on_error", [] { return py::cast(name_of(ImageConfig{}.on_error, kErrorPolicies)); }},
    {"rank", none},  // rank and world_size None: Config's 0 of 1, a warning where WORLD_SIZE says otherwise
    {"world_size", none},
    {"rank_by_shard", [] { return py::cast(false); }},
    {"extra_shards", [] { return py::cast(false); }},
    {"cache_dir", none},
    {"cache_gb", none},  // None: no limit
    {"download_first", [] { return py::cast(false); }},
    {"gpu_decode", [] { return py::cast("off"); }},
    {"mix_labels", [] { return py::cast("soft"); }},
    {"max_memory_mb", [] { return py::cast(0.0); }},  // 0: a quarter of physical memory
    {"slot_timeout", [] { return py::cast(60.0); }},
});

bool is_loader_keyword(std::string_view name) {
  return std::any_of(kLoaderKeywords.begin(), kLoaderKeywords.end(),
                     [name](const LoaderKeyword& k) { return name == k.name; });
}

// Whether a keyword reads back from a property of its name as given (checked):
// all but arrays= (x is held apart) and the two with properties of their own
// (batch_size, device: "cuda:0").
bool reads_back_as_given(std::string_view name) { return name != "arrays" && name != "batch_size" && name != "device"; }

// A keyword's place in kLoaderKeywords, found by the compiler: k["folder"]
// builds, a name that is not in the table does not.
struct KeywordAt {
  consteval KeywordAt(const char* name) {  // implicit, for k["name"]
    for (; at < kLoaderKeywords.size(); ++at) {
      if (std::string_view(kLoaderKeywords[at].name) == name) return;
    }
    throw "not a Loader keyword";  // in a consteval function: a build error here
  }
  std::size_t at = 0;
};

// The Loader's keywords as given, before any is checked, by name.
struct Keywords {
  std::array<py::object, kLoaderKeywords.size()> values;
  const py::object& operator[](KeywordAt k) const { return values[k.at]; }
  py::object& operator[](KeywordAt k) { return values[k.at]; }
};

// Loader(**keywords): every argument checked here, so that a wrong one gets a
// one-line error naming it, not pybind11's signature dump.
std::unique_ptr<PyLoader> new_loader(const Keywords& k) {
  py::object rank = k["rank"], world_size = k["world_size"];  // None: from the environment, below
  const auto folder = path("folder", k["folder"]), list = path("list", k["list"]), shards = path("shards", k["shards"]);
  const auto arrays = pair("arrays", k["arrays"]);
  const auto augment = text("augment", k["augment"], true), normalize = text("normalize", k["normalize"], true);
  const std::string device = device_name(k["device"]), on_error = *text("on_error", k["on_error"]);
  const bool shuffle = flag("shuffle", k["shuffle"]), drop_last = flag("drop_last", k["drop_last"]);
  const bool rank_by_shard = flag("rank_by_shard", k["rank_by_shard"]);
  const std::string mix_labels = *text("mix_labels", k["mix_labels"]);
  if (mix_labels != "soft" && mix_labels != "pair") {
    throw py::value_error("mix_labels=" + std::string(py::repr(k["mix_labels"])) + ": expected 'soft' or 'pair'");
  }
  const bool extra_shards = flag("extra_shards", k["extra_shards"]);
  if (extra_shards && k["shards"].is_none()) throw py::value_error("extra_shards=True: needs shards=");
  const auto cache_dir = path("cache_dir", k["cache_dir"]);
  if (cache_dir && !(shards && is_remote_location(*shards))) throw py::value_error("cache_dir=: needs shards= an http(s):// or s3:// URL");
  std::optional<std::uint64_t> cache_bytes;
  if (!k["cache_gb"].is_none()) {
    if (!(shards && is_remote_location(*shards))) throw py::value_error("cache_gb=: needs shards= an http(s):// or s3:// URL");
    try {
      cache_bytes = cache_gb_bytes(non_negative("cache_gb", k["cache_gb"]));
    } catch (const std::invalid_argument& e) {
      throw py::value_error("cache_gb=" + std::string(py::repr(k["cache_gb"])) + ": " + e.what());
    }
  }
  const bool download_first = flag("download_first", k["download_first"]);
  if (download_first && !(shards && is_remote_location(*shards))) {
    throw py::value_error("download_first=True: needs shards= an http(s):// or s3:// URL");
  }
  ImageConfig ic;
  const std::optional<std::string> transforms = transform_text(k["transforms"]);
  if (arrays && (!k["crop"].is_none() || augment || transforms)) {
    throw py::value_error("crop=, augment=, transforms=: not for arrays= (its rows are copied as they are)");
  }
  if (transforms && (!k["crop"].is_none() || augment)) {
    throw py::value_error("transforms=: not with crop= or augment= (the list's first transforms set the size and the augmentation)");
  }
  const int side = k["crop"].is_none() ? kDefaultCrop : int(whole("crop", k["crop"], 1, kMaxCrop));
  if (!arrays) ic.transforms = transforms ? parse_transform_list(*transforms) : preset_transforms(pick_preset(augment), side);
  if (const std::optional<std::string> views = views_text(k["views"])) {
    if (arrays || !k["crop"].is_none() || augment || transforms) {
      throw py::value_error("views=: not with arrays=, crop=, augment= or transforms= (each view has its own list)");
    }
    try {
      ic.views = parse_views(*views);
    } catch (const AugmentError& e) {
      std::string what = e.what();  // "views: entry 2: ..."
      if (what.rfind("views: ", 0) == 0) what.erase(0, 7);
      throw py::value_error("views=: " + what);
    }
  }
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
  LoaderSettings s = settings({k["batch_size"], k["workers"], k["seed"], k["epochs"], k["host_queue"], k["device_queue"],
                               k["device_buffers"], rank, world_size, k["max_workers"], k["max_host_queue"],
                               k["max_device_queue"]},
                              shuffle, drop_last, device, normalize);
  s.gpu_decode = gpu_decode_share(k["gpu_decode"]);
  if (!s.gpu_decode && s.config.tune_workers) {
    throw py::value_error("gpu_decode='auto': not with workers='auto' (the share balances a fixed worker count; give "
                          "one, or a fixed share)");
  }
  s.max_memory_mb = non_negative("max_memory_mb", k["max_memory_mb"]);  // 0: a quarter of physical memory
  if (arrays && s.gpu_decode != 0.0) throw py::value_error("gpu_decode=: not for arrays= (nothing to decode)");
  if (!ic.views.empty() && s.gpu_decode != 0.0) {
    throw py::value_error("gpu_decode=: not with views= (each view is a crop of one CPU decode)");
  }
  std::optional<std::chrono::milliseconds> wait;  // None: for ever
  if (!k["slot_timeout"].is_none()) {
    const double seconds = non_negative("slot_timeout", k["slot_timeout"]);
    if (seconds <= 0 || seconds > 1e9) throw py::value_error("slot_timeout=" + std::string(py::repr(k["slot_timeout"])) +
                                                             ": expected seconds > 0 (or None: wait for ever)");
    wait = std::chrono::milliseconds(std::max<std::int64_t>(1, std::int64_t(std::ceil(seconds * 1000))));
  }
  const Config& c = s.config;
  // What each property reads back (def_settings): the keyword as given, or as
  // checked where it was converted.
  Keywords read_back = k;
  // A count that takes "auto": "auto" and its ceiling, or the count and None.
  const auto read_back_count = [&](KeywordAt name, KeywordAt ceiling, bool tuned, std::size_t n) {
    read_back[name] = tuned ? py::object(py::str("auto")) : py::object(py::cast(n));
    read_back[ceiling] = tuned ? py::object(py::cast(n)) : py::object(py::none());
  };
  read_back_count("workers", "max_workers", c.tune_workers, c.workers);
  read_back["seed"] = py::cast(c.seed);
  read_back["shuffle"] = py::cast(c.shuffle);
  read_back["drop_last"] = py::cast(c.drop_last);
  read_back["epochs"] = py::cast(c.epochs);
  read_back_count("host_queue", "max_host_queue", c.tune_host_queue, c.host_queue_depth);
  read_back_count("device_queue", "max_device_queue", c.tune_device_queue, c.device_queue_depth);
  read_back["device_buffers"] = py::cast(c.device_buffers);
  read_back["on_error"] = py::cast(on_error);
  read_back["rank"] = py::cast(c.rank);
  read_back["world_size"] = py::cast(c.world_size);
  read_back["rank_by_shard"] = py::cast(rank_by_shard);
  read_back["extra_shards"] = py::cast(extra_shards);
  read_back["download_first"] = py::cast(download_first);
  read_back["max_memory_mb"] = py::cast(s.max_memory_mb);
  py::dict given;
  for (std::size_t i = 0; i < kLoaderKeywords.size(); ++i) {
    if (reads_back_as_given(kLoaderKeywords[i].name)) given[kLoaderKeywords[i].name] = read_back.values[i];
  }
  auto loader = make_loader(folder, list, shards, rank_by_shard,
                            extra_shards ? UnlistedShards::read : UnlistedShards::refuse,
                            RemoteOptions{.cache_dir = cache_dir.value_or(""), .cache_bytes = cache_bytes, .stream = !download_first}, arrays, std::move(ic),
                            std::move(s));
  loader->slot_timeout = wait;
  loader->given = std::move(given);
  loader->mix_pair = mix_labels == "pair";
  if (loader->mix_pair && !loader->loader->mixes()) {
    throw py::value_error("mix_labels='pair': needs MixUp or CutMix at the end of transforms=");
  }
  return loader;
}

// Loader(folder=..., ...): one py::object per keyword of kLoaderKeywords, in its
// order, with its default, so that pybind11 writes every keyword into the
// signature help() shows. Each is checked in new_loader, so that a wrong one
// gets a one-line error naming it, not pybind11's signature dump.
template <std::size_t>
struct AnObject {
  using type = py::object;
};

template <std::size_t... I>
void def_keyword_constructor(py::class_<PyLoader>& loader_class, std::index_sequence<I...>) {
  loader_class.def(py::init([](const typename AnObject<I>::type&... values) { return new_loader(Keywords{{values...}}); }),
                   py::kw_only(), py::arg_v(kLoaderKeywords[I].name, kLoaderKeywords[I].fallback())...);
}

// Loader(**keywords), and the error for anything else (positional arguments,
// an unknown keyword: DataLoader's named with this Loader's word for it).
void def_constructors(py::class_<PyLoader>& loader_class) {
  def_keyword_constructor(loader_class, std::make_index_sequence<kLoaderKeywords.size()>());
  loader_class
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
          if (is_loader_keyword(name)) continue;
          std::string hint;
          for (const auto& [theirs, ours] : kDataLoader) {
            if (name == theirs) hint = " (DataLoader's " + name + "; here: " + std::string(ours) + ")";
          }
          throw py::type_error("Loader() got an unexpected keyword argument '" + name + "'" + hint);
        }
        throw py::type_error("Loader(): these arguments match no signature");  // not reached: the first would have
      }));
}

// len(), iteration, epoch(e) and what a loader tells of its data and device.
void def_iteration(py::class_<PyLoader>& loader_class) {
  loader_class
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
      .def("_set_stream_source", [](PyLoader& L, py::object f) { L.stream_source = std::move(f); });
}

// The consumer's position (state_dict, load_state_dict) and the run's figures.
void def_state(py::class_<PyLoader>& loader_class) {
  loader_class
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
      .def("stats",
           [](PyLoader& L) {
             const PipelineStats s = L.locked([](Loader& l) { return l.stats(); });
             py::dict d = stats_dict(s);
             if (L.remote) {
               const StreamingCounters c = L.remote->counters();
               if (const std::optional<std::string> network = network_bottleneck(c, s.busy_s("workers"))) d["bottleneck"] = *network;
               d["remote"] = py::dict("shards"_a = c.shards, "cached"_a = c.cached, "downloaded"_a = c.downloaded, "downloaded_bytes"_a = c.downloaded_bytes,
                                      "failed"_a = c.failed, "uncached"_a = c.uncached, "uncached_why"_a = c.uncached_why, "range_reads"_a = c.range_reads, "read_ahead"_a = c.read_ahead, "range_bytes"_a = c.range_bytes,
                                      "network_wait_s"_a = c.range_seconds, "retries"_a = c.retries);
             }
             return d;
           })
      .def("skipped", [](PyLoader& L) {
        py::list out;
        for (const auto& s : L.locked([](Loader& l) { return l.skipped(); })) out.append(py::dict("epoch"_a = s.epoch, "index"_a = s.index, "reason"_a = message(s.reason),
                                                                                            "times"_a = s.times, "last_epoch"_a = s.last_epoch));
        return out;
      });
}

// close(), the with block, and the settings: read-only properties, as given.
void def_settings(py::class_<PyLoader>& loader_class) {
  loader_class
      .def("close", [](PyLoader& L) { L.close(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyLoader& L, py::args) { L.close(); })
      // Settings are fixed when a loader is made: assigning one would read
      // back changed while the pipeline kept the old value.
      .def("__setattr__", [loader_class](const py::handle& self, const py::str& name, const py::object& value) {
        const std::string n = name;
        const py::object own = py::getattr(loader_class, name, py::none());
        if (is_loader_keyword(n) || py::isinstance(own, py::module_::import("builtins").attr("property"))) {
          throw py::attribute_error("Loader." + n + " is read-only" +
                                    (is_loader_keyword(n) ? ": a loader's settings are fixed when it is made; make a "
                                                            "new one: conveyor.Loader(..., " + n + "=...)"
                                                          : std::string()));
        }
        if (PyObject_GenericSetAttr(self.ptr(), name.ptr(), value.ptr()) != 0) throw py::error_already_set();
      });
  for (const LoaderKeyword& keyword : kLoaderKeywords) {
    if (!reads_back_as_given(keyword.name)) continue;
    const std::string name = keyword.name;
    loader_class.def_property_readonly(keyword.name, [name](PyLoader& L) { return L.given[name.c_str()]; },
                                       "as given to the constructor");
  }
}

void bind_loader(py::module_& m) {
  py::class_<EpochIter>(m, "EpochIterator")
      .def("__iter__", [](EpochIter& it) -> EpochIter& { return it; })
      .def("__next__", &next_batch)
      .def_readonly("epoch", &EpochIter::epoch);
  py::class_<PyLoader> loader_class(m, "Loader");
  def_constructors(loader_class);
  def_iteration(loader_class);
  def_state(loader_class);
  def_settings(loader_class);
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
