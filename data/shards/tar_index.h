// Tar scanning for sharded datasets (WebDataset's layout: tar files whose
// members KEY.jpg, KEY.cls, ... make up the samples): scan_tar walks a tar's
// headers once and lists each regular file's name and where its bytes lie, so
// a sample can later be read with one pread at (offset, size), without
// extracting anything.
//
// Written by hand, not with libarchive: libarchive reads members as a stream
// and does not report where a member's data starts in the file (its
// archive_read_header_position() gives the header's offset, and a pax or GNU
// long-name header puts a variable number of blocks between the two). The
// format is small: 512-byte headers; ustar's prefix + name; pax 'x' records
// (path, size) and GNU 'L' long names for the member that follows; sizes in
// octal or GNU base-256. Because it parses untrusted bytes it is fuzzed
// (fuzz/fuzz_tar.cpp).
//
// Accepted: ustar, pax (POSIX.1-2001, Python's tarfile default) and GNU
// (`tar` on Debian) archives, as `tar` and Python's tarfile write them.
// Directories, devices, FIFOs and pax global headers are skipped (not
// samples). Refused, with a TarError naming the archive, the member or byte
// offset and the problem: a header checksum error, a member whose claimed size
// runs past the end of the file (truncation, or a hostile size), a member path
// that is absolute or climbs out with "..", a pax record that does not parse,
// a pax or long-name header over 1 MiB, a file that ends inside a header or
// without the end-of-archive marker (a zero block; tar only warns, but a shard
// cut at a member boundary would read as fewer samples), another archive's
// header anywhere after that marker (archives joined with `cat`, whose second
// part tar would not read either), and an empty file. Hard
// links, symbolic links and sparse files are listed with `unreadable` set.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace conveyor {

class TarError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One regular file of an archive: its path inside the archive and where its
// bytes are.
struct TarMember {
  std::string name;
  std::uint64_t offset = 0;  // of the data, from the start of the archive
  std::uint64_t size = 0;
  // Empty for a regular file. For a hard or symbolic link or a sparse file,
  // whose bytes are not (all) at `offset`: why it cannot be read, for the
  // caller to refuse where the member matters (an image, a label) and skip
  // where it does not (an extra member such as KEY.json).
  std::string unreadable;
  bool operator==(const TarMember&) const = default;
};

// Reads up to out.size() bytes at `offset`; returns how many it read (fewer
// only at the end of the file). Throws on an I/O error.
using ReadAt = std::function<std::size_t(std::uint64_t offset, std::span<std::byte> out)>;

// Lists the regular files of a `file_size`-byte archive read through `read`,
// in archive order. `name` names the archive in errors. Throws TarError (see
// the top) and what `read` throws.
std::vector<TarMember> scan_tar(const ReadAt& read, std::uint64_t file_size, const std::string& name);

// The same for a file on disk (read with pread). Throws TarError, also when
// the file cannot be opened or read.
std::vector<TarMember> scan_tar(const std::filesystem::path& file);

// Writing (conveyor pack): a ustar header for a member `name` of `size` bytes
// and typeflag `type` ('0': a regular file; tests write the others) (mode
// 0644, owner 0, mtime 0, so the same input packs to the same bytes),
// followed by the data and tar_padding(size) zero bytes; an archive ends with
// kTarEnd's two zero blocks. Any tar reads what these write. Throws TarError
// for a name over 100 bytes or a size over 8 GiB - 1 (ustar's limits; pack's
// keys and images stay far below them).
std::string tar_header(const std::string& name, std::uint64_t size, char type = '0');
std::size_t tar_padding(std::uint64_t size);
inline constexpr std::size_t kTarEnd = 1024;

}  // namespace conveyor
