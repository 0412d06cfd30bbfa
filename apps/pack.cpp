#include "apps/pack.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "apps/cli.h"
#include "data/atomic_file.h"
#include "data/dataset.h"
#include "image/decode.h"
#include "image/jpeg_restart.h"
#include "image/reencode.h"
#include "data/file_system.h"
#include "data/reader.h"
#include "data/shards/manifest.h"
#include "data/shards/shard_index.h"
#include "data/shards/tar_index.h"
#include "data/image_extensions.h"

namespace conveyor::apps {
namespace {

namespace fs = std::filesystem;

// The shards being written: one open file at a time, through an AtomicFile
// (renamed into place when complete, every write and the close checked; an
// unfinished one removed when the writer is destroyed).
class ShardWriter {
 public:
  ShardWriter(fs::path dir, std::uint64_t limit) : dir_(std::move(dir)), limit_(limit) {}
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Members of one sample go to one shard: a new one starts first when they
  // would take the current one past the limit. `source` and `class_name` are
  // written when not empty.
  void sample(const std::string& key, const std::string& ext, const std::vector<unsigned char>& image, std::int64_t label,
              std::string_view source, std::string_view class_name) {
    const std::string cls = std::to_string(label);
    const auto optional_bytes = [](std::string_view s) { return s.empty() ? 0 : member_bytes(s.size()); };
    const std::uint64_t bytes = member_bytes(image.size()) + member_bytes(cls.size()) + optional_bytes(source) +
                                optional_bytes(class_name);
    if (file_ && written_ > 0 && written_ + bytes + kTarEnd > limit_) close_shard();
    if (!file_) open_shard();
    member(key + ext, image.data(), image.size());
    // The small members last and together: a reader gets them with one read.
    member(key + ".cls", cls.data(), cls.size());
    if (!source.empty()) member(key + ".conveyor-source", source.data(), source.size());
    if (!class_name.empty()) member(key + ".conveyor-class", class_name.data(), class_name.size());
  }

  void finish() {
    if (file_) close_shard();
  }
  std::size_t shards() const { return shards_; }
  std::uint64_t total_bytes() const { return total_; }

 private:
  static std::uint64_t member_bytes(std::uint64_t size) { return 512 + size + tar_padding(size); }

  void open_shard() {
    char name[32];
    std::snprintf(name, sizeof name, "shard-%06zu.tar", shards_);
    path_ = dir_ / name;
    out_ = std::make_unique<AtomicFile>(path_, AtomicFile::Sync::yes);
    file_ = out_->stream();
    if (!file_) fail(out_->error());
    written_ = 0;
  }

  void member(const std::string& name, const void* data, std::size_t size) {
    const std::string header = tar_header(name, size);
    const std::string pad(tar_padding(size), '\0');
    write(header.data(), header.size());
    write(data, size);
    write(pad.data(), pad.size());
  }

  void write(const void* data, std::size_t size) {
    if (size && std::fwrite(data, 1, size, file_) != size) fail(errno);
    written_ += size;
    total_ += size;
  }

  void close_shard() {
    const std::string end(kTarEnd, '\0');
    write(end.data(), end.size());
    file_ = nullptr;
    if (const int err = out_->commit(); err != 0) fail(err);
    out_.reset();
    ++shards_;
  }

  [[noreturn]] void fail(int err) {
    file_ = nullptr;
    if (out_) out_->discard();
    throw std::runtime_error("pack: cannot write " + path_.string() + ": " + std::strerror(err));
  }

  fs::path dir_, path_;
  std::unique_ptr<AtomicFile> out_;  // the shard being written: renamed into place when whole
  std::uint64_t limit_;
  std::FILE* file_ = nullptr;
  std::uint64_t written_ = 0, total_ = 0;
  std::size_t shards_ = 0;
};

// Sample i's image extension, lower case (".jpg"); UsageError when its file has none.
std::string image_extension(const Dataset& d, std::size_t i) {
  std::string ext = fs::path(d.member(i)).extension().string();  // a file's, or a shard member's ("k.jpg")
  if (!is_image_extension(ext)) {
    throw UsageError("pack: " + d.name(i) + ": '" + ext + "' is not an image extension (" +
                     std::string(kImageExtensions[0]) + ", ...): a reader of the shards would not know it for one");
  }
  return lower_case(ext);
}

void progress(std::size_t done, std::size_t total, std::size_t shards, std::uint64_t bytes) {
  static const bool tty = ::isatty(STDERR_FILENO) != 0;
  if (!tty) return;
  std::fprintf(stderr, "\rpack: %zu/%zu samples (%zu%%), %zu shard(s), %.1f MB", done, total, done * 100 / total,
               shards + 1, double(bytes) / 1e6);
  std::fflush(stderr);
}

// An exclusive flock(2) on a folder, held while this object lives. The kernel
// drops it when the process ends however it ends, so a partial folder nobody
// holds is a dead pack's, whatever PID namespace either pack ran in (a
// container's pack is often PID 1, and kill(pid, 0) asks only our namespace).
class FolderLock {
 public:
  enum class Result { taken, held_elsewhere, unsupported };  // unsupported: no flock there (some network file systems)
  FolderLock() = default;
  FolderLock(FolderLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  FolderLock& operator=(FolderLock&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~FolderLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Tries for `patience` (0: once), in 10 ms steps, and stops early on a
  // signal: OUT is held only while a pack claims it, so a longer hold is
  // someone else's (a flock(1) around this very command would be waited for
  // for ever).
  Result lock(const fs::path& dir, std::chrono::milliseconds patience = {}) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Result::unsupported;
    const auto give_up = std::chrono::steady_clock::now() + patience;
    // flock's errno is kept at once: read after the clock and the sleep (which
    // may set errno, under a sanitizer's interceptors too) a lock held
    // elsewhere could read as "no flock here", and the caller fall back to the
    // unlocked protocol beside a pack that locks.
    int rc = 0, err = 0;
    for (;;) {
      rc = ::flock(fd, LOCK_EX | LOCK_NB);
      err = rc == 0 ? 0 : errno;
      if (rc == 0 || (err != EINTR && err != EWOULDBLOCK)) break;
      if (std::chrono::steady_clock::now() >= give_up || interrupt_signal() != 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (rc != 0) {
      ::close(fd);
      return err == EWOULDBLOCK || err == EINTR ? Result::held_elsewhere : Result::unsupported;
    }
    *this = FolderLock();
    fd_ = fd;
    return Result::taken;
  }

 private:
  int fd_ = -1;
};

// Removes what a pack into `out` that was killed left there (kPartialPrefix
// folders no live pack holds), but not `own`, this pack's. Throws UsageError
// when another pack is writing into it now, or when anything else is there.
// With `locks` (the caller holds OUT's lock, and every pack locks its partial
// folder under it before writing) a partial folder is live when it is locked;
// without, when a process of its PID is alive here.
void clear_stale_partials(const fs::path& out, const std::string& flag_value, const std::string& own, bool locks) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name == own) continue;
    if (!name.starts_with(kPartialPrefix)) throw UsageError("--out " + flag_value + ": exists and is not an empty folder");
    const std::string pid = name.substr(kPartialPrefix.size());
    FolderLock probe;
    const auto held = locks ? probe.lock(e.path()) : FolderLock::Result::unsupported;
    const long n = std::strtol(pid.c_str(), nullptr, 10);
    const bool live = held == FolderLock::Result::held_elsewhere ||
                      (held == FolderLock::Result::unsupported && n > 0 && (::kill(pid_t(n), 0) == 0 || errno == EPERM));
    if (live) throw UsageError("--out " + flag_value + ": another pack (process " + pid + ") is writing into it");
    fs::remove_all(e.path(), ec);
  }
}

// OUT is claimed under a lock on OUT itself: stale partial folders cleared,
// another pack's refused, this pack's (`partial`) made and, where the file
// system has flock, locked by `own` for as long as this pack lives. `claimed`
// turns true once `partial` is this pack's to remove. False when a signal
// came while another process held OUT's lock; throws UsageError when it held
// it for 5 s.
bool claim(const fs::path& out, const fs::path& partial, const std::string& flag_value, FolderLock& own, bool& claimed) {
  FolderLock lock;
  const auto got = lock.lock(out, std::chrono::seconds(5));
  if (got == FolderLock::Result::held_elsewhere) {
    if (interrupt_signal() != 0) return false;
    throw UsageError("--out " + flag_value + ": locked by another process for 5 s (a flock around this command?)");
  }
  const bool locks = got == FolderLock::Result::taken;
  if (locks) {
    // A folder of this PID left by a dead pack (PIDs are reused, in
    // containers above all) is cleared like any other stale one.
    clear_stale_partials(out, flag_value, "", locks);
    fs::create_directory(partial);
    claimed = true;
    if (own.lock(partial) != FolderLock::Result::taken) throw std::runtime_error("pack: cannot lock " + partial.string());
  } else {
    // No locks here: the partial folder first, then a look for another's,
    // so that two packs at once each see the other's and refuse.
    if (!fs::create_directory(partial)) {  // this PID's, left by a dead process: not ours to adopt
      fs::remove_all(partial);
      fs::create_directory(partial);
    }
    claimed = true;
    clear_stale_partials(out, flag_value, partial.filename().string(), locks);
  }
  return true;
}  // OUT's lock released: the next pack sees this one's locked folder

// --max-side's re-encode of sample i's `bytes`, in place; true when it made
// them a smaller JPEG. Throws naming the sample when it cannot decode it.
bool reencode_sample(const Dataset& d, std::size_t i, const ReencodeSettings& settings, std::vector<unsigned char>& bytes,
                     ImageDecoder& decoder, ReencodeScratch& scratch) {
  try {
    auto smaller = reencode_within(bytes, settings, decoder, scratch);
    if (!smaller) return false;
    bytes = std::move(*smaller);
    return true;
  } catch (const std::exception& e) {
    throw std::runtime_error("pack: " + d.name(i) + ": cannot re-encode it for --max-side: " + e.what());
  }
}

// What pack does to each image's bytes, and how many it did it to.
struct Recode {
  std::optional<ReencodeSettings> reencode;  // --max-side: images larger than its max_side re-encoded
  int raw = 0;                               // --raw N: every image as a PPM of its pixels at most N on a side
  bool restart = true;                       // not --original-bytes: JPEGs re-encoded losslessly with restart markers
};
struct RecodeCounts {
  std::size_t reencoded = 0, restarted = 0, kept_jpegs = 0;
  std::string first_kept;  // the first JPEG kept as it is, and why
};

// One sample between its read and its write.
struct PackItem {
  std::vector<unsigned char> bytes;
  std::string ext;
  bool restarted = false, kept = false;  // a JPEG re-encoded with restart markers, or kept as it was
  std::string kept_why;
};

// The lossless restart-marker re-encode of a JPEG sample, in place
// (image/jpeg_restart.h). A JPEG it cannot re-encode (progressive, arithmetic,
// over the decoder's pixel limit, or one libjpeg cannot read) is kept as it is
// and marked: reading it is the reader's to judge, as for any file pack stores.
void add_restart_markers_to(PackItem& item) {
  if (sniff_format(item.bytes) != ImageFormat::jpeg) return;
  try {
    if (auto marked = add_restart_markers(item.bytes)) {
      item.bytes = std::move(*marked);
      item.restarted = true;
      return;
    }
    item.kept_why = "progressive or arithmetic-coded";
  } catch (const DecodeError& e) {
    item.kept_why = e.what();
  }
  item.kept = true;
}

// The restart re-encode of items[0, n) on every core: it costs about twice a
// decode (libjpeg reads every coefficient and writes them again), where
// reading and writing cost little.
void add_restart_markers_to(std::vector<PackItem>& items, std::size_t n) {
  const unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), unsigned(n)));
  std::vector<std::exception_ptr> errors(threads);
  const auto work = [&](unsigned t) {
    try {
      for (std::size_t j = t; j < n; j += threads) add_restart_markers_to(items[j]);
    } catch (...) {
      errors[t] = std::current_exception();  // out of memory: rethrown below, after the join
    }
  };
  {
    std::vector<std::jthread> helpers;
    for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(work, t);
    work(0);
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Every sample of `d` into `w`, in order, with a progress line; stops at the
// first SIGINT or SIGTERM. Each image's bytes are recoded as `recode` says:
// samples go through in chunks, read and recoded for --max-side or --raw in
// order, given restart markers on every core, then written in order.
// Returns how many were written: d.size(), or fewer when a signal stopped it.
// Throws naming the sample that cannot be read.
std::size_t write_samples(const Dataset& d, ShardWriter& w, const Recode& recode, RecodeCounts& counts) {
  const SampleReader reader(d, nullptr, DecodeLimits{}.max_file_bytes, 1);  // one shard at a time, in order
  ImageDecoder decoder;  // --max-side's and --raw's, reused from sample to sample
  ReencodeScratch scratch;
  const std::size_t step = std::max<std::size_t>(1, d.size() / 100);
  const std::size_t folder = d.common_folder();
  // A chunk: 64 samples, or fewer when their files pass 64 MiB; one sample when
  // nothing is re-encoded on every core.
  const bool parallel = recode.restart && recode.raw == 0;
  const std::size_t chunk = parallel ? 64 : 1;
  constexpr std::size_t kChunkBytes = std::size_t{64} << 20, kKeptCapacity = std::size_t{16} << 20;
  std::vector<PackItem> items(chunk);
  for (std::size_t begin = 0, n = 0; begin < d.size(); begin += n) {
    n = 0;
    for (std::size_t bytes = 0; n < chunk && begin + n < d.size() && bytes < kChunkBytes; ++n) {
      const std::size_t j = n;
      if (interrupt_signal() != 0) return begin;
      const std::size_t i = begin + j;
      PackItem& item = items[j];
      std::vector<unsigned char> buffer = std::move(item.bytes);  // kept from sample to sample
      item = PackItem{};
      item.bytes = std::move(buffer);
      try {
        reader.read(i, item.bytes);
      } catch (const std::exception& e) {
        throw std::runtime_error("pack: " + d.name(i) + ": " + e.what());
      }
      item.ext = image_extension(d, i);
      if (recode.reencode && reencode_sample(d, i, *recode.reencode, item.bytes, decoder, scratch)) {
        item.ext = ".jpg";
        ++counts.reencoded;
      }
      if (recode.raw > 0) {
        try {
          item.bytes = raw_within(item.bytes, recode.raw, decoder, scratch);
        } catch (const std::exception& e) {
          throw std::runtime_error("pack: " + d.name(i) + ": cannot decode it for --raw: " + e.what());
        }
        item.ext = ".ppm";
      }
      bytes += item.bytes.size();
    }
    if (parallel) add_restart_markers_to(items, n);
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = begin + j;
      const PackItem& item = items[j];
      counts.restarted += item.restarted;
      if (item.kept && counts.kept_jpegs++ == 0) counts.first_kept = d.name(i) + " (" + item.kept_why + ")";
      char key[24];
      std::snprintf(key, sizeof key, "%09zu", i);
      const std::int64_t label = d.label(i);
      const std::string source = d.relative_name(i, folder);
      if (source.size() > kMaxPackedName) {
        throw UsageError("pack: " + d.name(i) + ": a name of more than " + std::to_string(kMaxPackedName) + " bytes");
      }
      w.sample(key, item.ext, item.bytes, label, source,
               d.classes().empty() ? std::string_view() : std::string_view(d.classes()[std::size_t(label)]));
      if (i % step == 0) progress(i, d.size(), w.shards(), w.total_bytes());
      if (items[j].bytes.capacity() > kKeptCapacity) items[j].bytes = {};  // a large file's buffer not kept for the next
    }
  }
  w.finish();
  return d.size();
}

// The finished shards move up from `partial` into OUT under OUT's lock, and
// only into an OUT that holds no one else's: two packs that both got past the
// claim (CI's TSan run saw one) must not move one's shard-000000.tar over the
// other's, leaving one pack's manifest over the other's shards. Partial
// folders are another pack's work in progress, refused when it finishes in
// turn. Each file moved is added to `moved` (for the caller's undo).
void move_up(const fs::path& partial, const fs::path& out, const std::string& flag_value, std::vector<fs::path>& moved) {
  FolderLock finishing;
  if (finishing.lock(out, std::chrono::seconds(5)) == FolderLock::Result::held_elsewhere) {
    throw UsageError("--out " + flag_value + ": locked by another process for 5 s (a flock around this command?)");
  }
  for (const auto& e : fs::directory_iterator(out)) {
    if (!e.path().filename().string().starts_with(kPartialPrefix)) {
      throw UsageError("--out " + flag_value + ": exists and is not an empty folder (another pack finished into it first)");
    }
  }
  std::vector<fs::path> shards;
  for (const auto& e : fs::directory_iterator(partial)) shards.push_back(e.path());
  std::sort(shards.begin(), shards.end());
  for (const fs::path& f : shards) {
    fs::rename(f, out / f.filename());
    moved.push_back(out / f.filename());
  }
  fs::remove(partial);  // empty now: OUT reads as whole from here on
}

}  // namespace

// The shards are written into OUT/.partial-PID and moved up into OUT once
// every one is complete; `--shards` refuses a folder holding such a partial
// folder, so a pack that is killed (SIGKILL, a crash, a full disk) never
// leaves an OUT that reads as a smaller dataset, and the next pack into OUT
// clears what it left: a partial folder is live while its pack holds a
// flock(2) on it, taken under a lock on OUT (where the file system has no
// flock, while a process of its PID is alive). That holds on one host: over
// NFS or CIFS a folder's flock may be local to each machine, so packs from two
// hosts into one OUT are not told apart. SIGINT and SIGTERM stop it between samples and remove
// what it wrote. Inside OUT, not beside it: OUT may be a mount point, a link
// or ".", and the moves stay on one file system.
int pack(const Options& o) {
  check_outputs(o, {{"--out", o.out, true}});
  if (o.quality > 0 && o.max_side == 0) throw UsageError("--quality: only with --max-side (pack keeps the files' bytes otherwise)");
  if (o.raw > 0 && o.max_side > 0) throw UsageError("--raw, --max-side: give one (--raw N stores pixels at most N on a side)");
  if (o.raw > 0 && o.original_bytes) throw UsageError("--raw, --original-bytes: give one (--raw stores pixels, not the files)");
  fs::path out = fs::path(o.out).lexically_normal();
  if (!out.has_filename() && out.has_parent_path() && out != out.root_path()) out = out.parent_path();  // "shards/"
  std::error_code ec;
  const bool existed = fs::exists(out, ec);
  if (existed && !fs::is_directory(out, ec)) throw UsageError("--out " + o.out + ": exists and is not an empty folder");
  // The dataset first, before anything is made: a signal during a long scan
  // ends the program with nothing to undo.
  const Dataset d = open_dataset(o, Announce::when_made, Remote::download_first);
  for (std::size_t i = 0; i < d.size(); ++i) (void)image_extension(d, i);  // refuse before writing anything
  // Then OUT is claimed, under a lock on OUT itself: stale partial folders
  // cleared, another pack's refused, this pack's made and locked. Two packs
  // started at once into one OUT take turns: one packs, the other refuses.
  fs::create_directories(out);
  const fs::path partial = out / (std::string(kPartialPrefix) + std::to_string(::getpid()));
  catch_interrupts();
  std::vector<fs::path> moved;
  // Nothing half-made is left: the partial folder, what was moved (and the
  // index made of it), and OUT if pack made it.
  bool claimed = false;  // the partial folder is this pack's (not another's of the same PID)
  const auto undo = [&] {
    if (claimed) fs::remove_all(partial, ec);
    for (const fs::path& f : moved) fs::remove(f, ec);
    if (!moved.empty()) {
      fs::remove(out / ".conveyor-index", ec);
      fs::remove(out / kManifestName, ec);
    }
    if (!existed) fs::remove(out, ec);
  };
  FolderLock own;  // held to the end: this pack is alive
  try {
    if (!claim(out, partial, o.out, own, claimed)) {
      const int sig = interrupt_signal();
      undo();
      std::printf("pack: interrupted by %s while waiting for --out; nothing written\n", signal_word(sig));
      return 128 + sig;
    }
    ShardWriter w(partial, std::uint64_t(o.shard_mb) << 20);
    Recode recode;
    if (o.max_side > 0) recode.reencode = ReencodeSettings{o.max_side, o.quality > 0 ? o.quality : 90};
    recode.raw = o.raw;
    recode.restart = !o.original_bytes;
    RecodeCounts counts;
    if (const std::size_t written = write_samples(d, w, recode, counts); written < d.size()) {
      const int sig = interrupt_signal();
      wipe_progress_line();
      undo();
      std::printf("pack: interrupted by %s after %zu of %zu samples; nothing written\n", signal_word(sig), written, d.size());
      return 128 + sig;
    }
    wipe_progress_line();
    move_up(partial, out, o.out, moved);
    IndexSource how = IndexSource::built;
    // Scans what was written: the index --shards reads. A pack started beside
    // this one may have made its partial folder here and be about to remove it
    // (it saw this pack's and refuses): not a reason to fail this one.
    const ShardIndex index = load_shard_index(out, &how, PartialFolders::ignore);
    if (index.samples.size() != d.size()) {
      throw std::runtime_error("pack: the shards in " + out.string() + " hold " + std::to_string(index.samples.size()) +
                               " samples, not " + std::to_string(d.size()));
    }
    // Last: what a reader checks the folder against (a shard lost in a copy).
    if (!write_manifest(out, index)) throw std::runtime_error("pack: cannot write " + (out / kManifestName).string());
    if (o.raw > 0) {
      std::printf("stored %zu samples as RGB pixels (PPM) at most %d px on the longest side\n", d.size(), o.raw);
    }
    if (recode.reencode) {
      std::printf("re-encoded %zu of %zu samples to at most %d px on the longest side, JPEG quality %d\n",
                  counts.reencoded, d.size(), recode.reencode->max_side, recode.reencode->quality);
    }
    if (counts.restarted > 0) {
      std::printf("added restart markers to %zu JPEG(s), losslessly: a crop decodes only its part of them\n",
                  counts.restarted);
    }
    if (counts.kept_jpegs > 0) {
      std::printf("kept %zu JPEG(s) as they are, decoded whole rows above a crop; the first: %s\n", counts.kept_jpegs,
                  counts.first_kept.c_str());
    }
    std::printf("packed %zu samples into %zu shard(s), %.1f MB, in %s (index: %s)\n", d.size(), w.shards(),
                double(w.total_bytes()) / 1e6, out.c_str(),
                how == IndexSource::built_beside ? index_beside(out).c_str()
                : how == IndexSource::built_cached ? index_in_cache(out).c_str() : "not written");
  } catch (...) {
    undo();
    throw;
  }
  return 0;
}

}  // namespace conveyor::apps
