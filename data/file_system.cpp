#include "data/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

namespace conveyor {
namespace {

std::string errno_reason(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// What a non-regular file is, for the error that refuses it.
const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

class PosixFile final : public File {
 public:
  explicit PosixFile(int fd) : fd_(fd) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const std::string reason = errno_reason("cannot stat");
      ::close(fd_);
      throw std::runtime_error(reason);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw std::runtime_error(std::string("not a regular file (") + file_kind(st.st_mode) + ")");
    }
    size_ = std::uint64_t(st.st_size);
  }
  ~PosixFile() override { ::close(fd_); }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  std::uint64_t size() const override { return size_; }
  std::size_t read_at(std::uint64_t offset, void* buf, std::size_t n) override {
    if (offset > std::uint64_t(std::numeric_limits<off_t>::max())) return 0;  // past any file: end of file
    for (;;) {
      const ssize_t got = ::pread(fd_, buf, n, off_t(offset));
      if (got >= 0) return std::size_t(got);
      if (errno != EINTR) throw std::runtime_error(errno_reason("read failed"));
    }
  }
  void will_need(std::uint64_t offset, std::uint64_t size) noexcept override {
    constexpr auto kMax = std::uint64_t(std::numeric_limits<off_t>::max());
    if (size == 0 || offset > kMax || size > kMax - offset) return;  // 0 would mean "to the end of the file"
    (void)::posix_fadvise(fd_, off_t(offset), off_t(size), POSIX_FADV_WILLNEED);  // advice: a refusal changes nothing
  }

 private:
  int fd_;
  std::uint64_t size_ = 0;
};

std::atomic<std::uint64_t> g_opens{0};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<File> open(const std::filesystem::path& path) override {
    g_opens.fetch_add(1, std::memory_order_relaxed);
    int fd;
    do {
      // O_NONBLOCK: opening a FIFO with no writer would otherwise block forever
      // (and SA_RESTART would restart it after Ctrl-C); PosixFile refuses it
      // once fstat says what it is. Regular files ignore the flag.
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw std::runtime_error(errno_reason("cannot open"));
    return std::make_unique<PosixFile>(fd);
  }
};

}  // namespace

std::uint64_t posix_file_opens() { return g_opens.load(std::memory_order_relaxed); }

std::filesystem::path private_temp_dir() {
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  tmp = std::filesystem::absolute(tmp, ec);  // a relative TMPDIR would follow the working directory
  if (ec) tmp = "/tmp";
  return tmp / ("conveyor-" + std::to_string(::geteuid()));
}

std::optional<std::filesystem::path> user_cache_dir() {
  // The XDG base directory spec: a relative XDG_CACHE_HOME is invalid and ignored
  // (it once put the default dataset under the current directory).
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::filesystem::path(xdg) / "conveyor";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "conveyor";
  const std::filesystem::path dir = private_temp_dir();
  ::mkdir(dir.c_str(), 0700);  // EEXIST is checked below, like any other folder found there
  struct stat st {};
  // Ours alone, and usable by us (a umask of 0277 would make it 0500).
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0 ||
      (st.st_mode & S_IRWXU) != S_IRWXU) {
    return std::nullopt;
  }
  return dir;
}

int write_bytes(const std::filesystem::path& path, std::span<const unsigned char> bytes) noexcept {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return errno;
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 && wrote) return errno;
  return wrote ? 0 : (err != 0 ? err : EIO);
}

std::shared_ptr<FileSystem> posix_file_system() {
  static const auto fs = std::make_shared<PosixFileSystem>();
  return fs;
}

namespace {
// Reads [offset, offset + size) of an open file, in chunks so that a stop is
// noticed between them during a slow read.
void read_range(File& file, std::uint64_t offset, std::uint64_t size, std::vector<unsigned char>& out,
                const std::atomic<bool>* stopping) {
  out.resize(size);
  constexpr std::size_t kChunk = std::size_t(4) << 20;
  std::size_t got = 0;
  while (got < size) {
    if (stopping && stopping->load(std::memory_order_relaxed)) throw ReadCancelled();
    const std::size_t n = file.read_cancellable(offset + got, out.data() + got, std::min<std::size_t>(kChunk, size - got), stopping);
    if (n == 0) break;  // the file shrank while we read it
    got += n;
  }
  out.resize(got);
}

void check_limit(std::uint64_t size, std::uint64_t max_bytes, const char* what) {
  if (size > max_bytes) {
    throw std::runtime_error(std::string(what) + " of " + std::to_string(size) + " bytes is over the limit of " +
                             std::to_string(max_bytes) + " (max_file_bytes)");
  }
}
}  // namespace

void read_whole_file(FileSystem& fs, const std::filesystem::path& path, std::uint64_t max_bytes,
                     std::vector<unsigned char>& out, const std::atomic<bool>* stopping) {
  const std::unique_ptr<File> file = fs.open(path);
  check_limit(file->size(), max_bytes, "file");
  read_range(*file, 0, file->size(), out, stopping);
}

void read_file_range(FileSystem& fs, const std::filesystem::path& path, std::uint64_t offset, std::uint64_t size,
                     std::uint64_t max_bytes, std::vector<unsigned char>& out, const std::atomic<bool>* stopping) {
  check_limit(size, max_bytes, "member");
  read_file_range(*fs.open(path), offset, size, max_bytes, out, stopping);
}

void read_file_range(File& file, std::uint64_t offset, std::uint64_t size, std::uint64_t max_bytes,
                     std::vector<unsigned char>& out, const std::atomic<bool>* stopping) {
  check_limit(size, max_bytes, "member");
  if (offset > file.size() || size > file.size() - offset) {
    throw std::runtime_error("cut short: the file is " + std::to_string(file.size()) + " bytes, the range ends at " +
                             std::to_string(offset + size));
  }
  read_range(file, offset, size, out, stopping);
  if (out.size() < size) {  // the file shrank under us: no decoder can tell a cut member from a short one
    throw std::runtime_error("cut short: read " + std::to_string(out.size()) + " of the " + std::to_string(size) +
                             " bytes at byte " + std::to_string(offset));
  }
}

void read_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::vector<unsigned char>& out) {
  read_whole_file(*posix_file_system(), path, max_bytes, out);
}

}  // namespace conveyor
