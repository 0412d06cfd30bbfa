// FileSystem: how the image stage reads its files, behind an interface (as
// leveldb's Env) so tests can inject faults: EIO, short reads, truncation,
// stalls, files that vanish.
//
//   auto files = posix_file_system();
//   std::vector<unsigned char> bytes;
//   read_whole_file(*files, "train/cat/1.jpg", 256 << 20, bytes, &stopping);
//
// Contract.
// - FileSystem::open and File::read_at throw std::runtime_error with the reason
//   only ("cannot open: No such file or directory"); the caller names the path.
// - File::read_at may return fewer bytes than asked at any point (a short
//   read); 0 means end of file.
// - posix_file_system()'s open never blocks on what is not a regular file (a
//   FIFO with no writer, a tty): it opens non-blocking and refuses it by kind
//   ("not a regular file (a FIFO)").
// - read_whole_file refuses non-regular files and files over max_bytes before
//   reading, reads in chunks until the size fstat gave or end of file (a file
//   that shrank meanwhile comes back short, and its decoder reports it
//   truncated), and between chunks gives up with ReadCancelled once *stopping
//   is set. A read blocked inside the kernel (a hung network mount) cannot be
//   interrupted this way; a slow one that makes progress can.
// Thread safety: a FileSystem is shared by every worker; open() and a File's
// read() on distinct Files must be safe to call concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

namespace conveyor {

class File {
 public:
  virtual ~File() = default;
  // The size when opened. Throws std::runtime_error for anything but a regular file.
  virtual std::uint64_t size() const = 0;
  // Up to n bytes at `offset` into buf (pread: no shared position); 0 at or
  // past the end of file. Throws std::runtime_error on error.
  virtual std::size_t read_at(std::uint64_t offset, void* buf, std::size_t n) = 0;
  // read_at, for a file whose reads can wait long (a request over the
  // network): gives up with ReadCancelled soon after *stopping is set.
  // Default: read_at.
  virtual std::size_t read_cancellable(std::uint64_t offset, void* buf, std::size_t n, const std::atomic<bool>* stopping) {
    (void)stopping;
    return read_at(offset, buf, n);
  }
  // Advice that bytes [offset, offset + size) will be read soon, so the system
  // may start reading them now (posix_fadvise WILLNEED). Default: nothing.
  virtual void will_need(std::uint64_t offset, std::uint64_t size) noexcept {
    (void)offset;
    (void)size;
  }
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  virtual std::unique_ptr<File> open(const std::filesystem::path& path) = 0;
};

// open(2) / fstat(2) / read(2), retrying EINTR. Shared; stateless.
std::shared_ptr<FileSystem> posix_file_system();

// The user's cache folder for Conveyor: $XDG_CACHE_HOME/conveyor, else
// $HOME/.cache/conveyor, else a private one in the temp folder
// (TMPDIR/conveyor-UID, made with mode 0700). A temp folder is used only while
// it is a real folder (not a link) owned by this user with no access for
// anyone else: a shared /tmp/.cache would let any local user plant a cached
// shard index with other labels. Returns nullopt when no folder qualifies.
// Does not create the first two (their writers do).
std::optional<std::filesystem::path> user_cache_dir();
// The private temp folder user_cache_dir() falls back to, whether or not it
// qualifies (for messages): the absolute TMPDIR (else /tmp) / conveyor-UID.
std::filesystem::path private_temp_dir();

// Writes `bytes` to `path` (created or truncated), checking every step:
// fopen, fwrite, fflush and fclose. Returns 0, or the errno of the first step
// that failed (ENOSPC from a flush or a close too), for the caller's message.
int write_bytes(const std::filesystem::path& path, std::span<const unsigned char> bytes) noexcept;

// Thrown by read_whole_file when *stopping was set while it read.
class ReadCancelled : public std::runtime_error {
 public:
  ReadCancelled() : std::runtime_error("read cancelled: the pipeline is stopping") {}
};

// read_whole_file over posix_file_system(), for tools that read outside a pipeline.
void read_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::vector<unsigned char>& out);

// Reads the file into out (resized to what was read); see the contract above.
void read_whole_file(FileSystem& fs, const std::filesystem::path& path, std::uint64_t max_bytes,
                     std::vector<unsigned char>& out, const std::atomic<bool>* stopping = nullptr);
// Reads bytes [offset, offset + size) of the file into out (a sample inside a
// shard), as read_whole_file does the whole file: size over max_bytes is
// refused before reading; a file too short for the range throws "cut short:
// the file is N bytes, the range ends at M", and one that shrinks while it is
// read throws "cut short: read N of the M bytes at byte O".
void read_file_range(FileSystem& fs, const std::filesystem::path& path, std::uint64_t offset, std::uint64_t size,
                     std::uint64_t max_bytes, std::vector<unsigned char>& out, const std::atomic<bool>* stopping = nullptr);
// The same from a file already open (a shard kept open across samples).
void read_file_range(File& file, std::uint64_t offset, std::uint64_t size, std::uint64_t max_bytes,
                     std::vector<unsigned char>& out, const std::atomic<bool>* stopping = nullptr);

// Files opened through posix_file_system() since the process started (for
// benchmarks: files vs shards). Thread-safe.
std::uint64_t posix_file_opens();

}  // namespace conveyor
