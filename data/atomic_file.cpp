#include "data/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <string>
#include <system_error>

namespace conveyor {
namespace fs = std::filesystem;

namespace {
// A name no other writer of this process or another uses at once.
fs::path temporary_for(const fs::path& path) {
  static std::atomic<unsigned> serial{0};
  fs::path tmp = path;
  tmp += ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()) + "." +
         std::to_string(serial.fetch_add(1));
  return tmp;
}
}  // namespace

AtomicFile::AtomicFile(fs::path path, Sync sync) : path_(std::move(path)), sync_(sync) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    file_ = std::fopen(path_.c_str(), "wb");  // a device or a FIFO: in place
    if (!file_) open_error_ = errno;
    return;
  }
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path_, ec))) {
    const fs::path target = fs::canonical(path_, ec);
    if (!ec) path_ = target;
  }
  const bool existed = ::stat(path_.c_str(), &st) == 0;
  tmp_ = temporary_for(path_);
  const int fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, existed ? (st.st_mode & 07777) : 0666);
  if (fd < 0) {
    open_error_ = errno;
    return;
  }
  if (existed) (void)::fchmod(fd, st.st_mode & 07777);  // the old bits, not the umask's
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    open_error_ = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
  }
}

AtomicFile::~AtomicFile() {
  if (!done_) discard();
}

int AtomicFile::commit() noexcept {
  if (done_) return result_;
  if (!file_) {
    done_ = true;
    result_ = open_error_ != 0 ? open_error_ : EBADF;
    return result_;
  }
  int err = std::ferror(file_) ? (errno != 0 ? errno : EIO) : 0;
  if (err == 0 && std::fflush(file_) != 0) err = errno;
  if (err == 0 && sync_ == Sync::yes && ::fsync(::fileno(file_)) != 0) err = errno;
  if (std::fclose(file_) != 0 && err == 0) err = errno;
  file_ = nullptr;
  if (err == 0 && !tmp_.empty() && ::rename(tmp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0 && !tmp_.empty()) ::unlink(tmp_.c_str());
  done_ = true;
  result_ = err;
  return err;
}

void AtomicFile::discard() noexcept {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  if (!tmp_.empty() && !done_) ::unlink(tmp_.c_str());
  done_ = true;
  if (result_ == 0) result_ = ECANCELED;
}

int write_file_atomically(const fs::path& path, std::span<const unsigned char> bytes, AtomicFile::Sync sync) noexcept {
  try {
    AtomicFile out(path, sync);
    if (out.error() != 0) return out.error();
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), out.stream()) != bytes.size()) {
      const int err = errno != 0 ? errno : EIO;
      out.discard();
      return err;
    }
    return out.commit();
  } catch (...) {  // a path's allocation
    return ENOMEM;
  }
}

}  // namespace conveyor
