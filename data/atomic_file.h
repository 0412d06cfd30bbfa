// AtomicFile: an output file written whole or not at all. Bytes go to a
// temporary beside it (PATH.tmpPID-N), which commit() renames over PATH, so a
// reader sees the old file or the new one, never a part of one. A failed
// write (a full disk), a failed commit, or destruction without commit()
// removes the temporary and leaves PATH as it was (or absent). Every output
// Conveyor's tools write (--json, --csv, --trace, --checkpoint, plot scripts,
// shards and their index) goes through it.
//
//   AtomicFile out("r.json");
//   if (out.error() == 0) std::fputs(text, out.stream());
//   if (const int err = out.commit(); err != 0) ... strerror(err) ...
//
// Contract.
// - A PATH that exists and is not a regular file (/dev/stdout, /dev/full, a
//   FIFO) cannot be renamed over: it is written in place, as before.
// - A PATH that is a symbolic link is resolved: the file it names is replaced
//   and the link kept. The new file keeps an existing file's permission bits.
// - A temporary left by a killed process stays (its PID in its name says
//   whose); nothing here removes another process's.
// Thread safety: one thread at a time on an AtomicFile.
#pragma once

#include <cstdio>
#include <filesystem>
#include <span>

namespace conveyor {

class AtomicFile {
 public:
  enum class Sync { no, yes };  // yes: fsync before the rename (survives a power cut)

  // Opens the temporary (or PATH itself, in place); error() says why not.
  explicit AtomicFile(std::filesystem::path path, Sync sync = Sync::no);
  // Discards what was written unless commit() ran.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // The stream to write to; nullptr when the open failed or after commit()/discard().
  std::FILE* stream() const { return file_; }
  // 0, or the errno of the open that failed.
  int error() const { return open_error_; }
  // The file written to now: the temporary, or PATH when written in place.
  const std::filesystem::path& written() const { return tmp_.empty() ? path_ : tmp_; }

  // Flushes, closes and renames the temporary over PATH. Returns 0, or the
  // errno of the first step that failed (a write error the stream kept
  // included), after discarding. Idempotent: later calls return the first result.
  int commit() noexcept;
  // Closes and removes the temporary; PATH is left as it was.
  void discard() noexcept;

 private:
  std::filesystem::path path_, tmp_;  // tmp_ empty: written in place
  Sync sync_;
  std::FILE* file_ = nullptr;
  int open_error_ = 0;
  bool done_ = false;
  int result_ = 0;
};

// Writes `bytes` to `path` through an AtomicFile. Returns 0, or the errno of
// the first failed step; `path` then is as it was.
int write_file_atomically(const std::filesystem::path& path, std::span<const unsigned char> bytes,
                          AtomicFile::Sync sync = AtomicFile::Sync::no) noexcept;

}  // namespace conveyor
