#include "data/shards/tar_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <system_error>

namespace conveyor {
namespace {

constexpr std::uint64_t kBlock = 512;
constexpr std::uint64_t kMaxMetadata = std::uint64_t{1} << 20;  // pax and long-name headers
constexpr std::uint64_t kNoSize = ~std::uint64_t{0};             // no pax size for the next member

using Header = std::array<unsigned char, kBlock>;

std::string_view field(const Header& h, std::size_t at, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(h.data()) + at;
  return {p, strnlen(p, len)};
}

std::uint64_t round_up(std::uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// Octal digits (leading spaces, trailing NULs or spaces), or GNU base-256
// (first byte's top bit set). Empty on anything else or an overflow.
std::optional<std::uint64_t> number(const Header& h, std::size_t at, std::size_t len) {
  if (h[at] & 0x80) {
    if (h[at] != 0x80) return std::nullopt;  // negative, or more than 63 bits
    std::uint64_t v = 0;
    for (std::size_t i = at + 1; i < at + len; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | h[i];
    }
    return v;
  }
  std::size_t i = at, end = at + len;
  while (i < end && h[i] == ' ') ++i;
  std::uint64_t v = 0;
  bool digits = false;
  for (; i < end && h[i] >= '0' && h[i] <= '7'; ++i, digits = true) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + (h[i] - '0');
  }
  for (; i < end; ++i) {
    if (h[i] != ' ' && h[i] != 0) return std::nullopt;
  }
  return digits ? std::optional(v) : std::nullopt;
}

bool checksum_ok(const Header& h) {
  const auto stored = number(h, 148, 8);
  if (!stored) return false;
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;  // some old tars summed signed chars
  for (std::size_t i = 0; i < kBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return *stored == unsigned_sum || std::int64_t(*stored) == signed_sum;
}

bool all_zero(const Header& h) {
  for (auto c : h) {
    if (c) return false;
  }
  return true;
}

// A member path we would be willing to extract: relative, no "..".
bool safe_path(std::string_view p) {
  if (p.empty() || p.front() == '/') return false;
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t end = std::min(p.find('/', start), p.size());
    if (p.substr(start, end - start) == "..") return false;
    start = end + 1;
  }
  return true;
}

constexpr const char* kSparse = "a GNU sparse file, which Conveyor does not read (tar without --sparse)";

class Scanner {
 public:
  Scanner(const ReadAt& read, std::uint64_t size, const std::string& name) : read_(read), size_(size), name_(name) {}

  std::vector<TarMember> run() {
    std::vector<TarMember> out;
    std::optional<std::string> next_name;  // from a pax 'x' or GNU 'L' header
    std::uint64_t next_size = kNoSize;
    bool next_sparse = false;  // a pax GNU.sparse.* record: the next member's bytes are not laid out whole
    if (size_ == 0) fail("an empty file (0 bytes), not a tar archive");
    while (at_ + kBlock <= size_) {
      Header h{};
      read_exact(at_, h);
      if (all_zero(h)) {  // the end-of-archive marker
        refuse_joined_archive(at_);
        return out;
      }
      if (!checksum_ok(h)) fail("header checksum error at byte " + std::to_string(at_));
      const auto header_at = at_;
      const auto stored = number(h, 124, 12);
      if (!stored) fail("bad size field in the header at byte " + std::to_string(header_at));
      const char type = char(h[156]);
      const bool regular = type == '0' || type == 0 || type == '7';
      const std::uint64_t data_size = regular && next_size != kNoSize ? next_size : *stored;
      std::uint64_t data_at = at_ + kBlock;
      // An old GNU sparse member ('S') with more than 4 regions is followed by
      // extension headers before its data, each flagging whether another follows.
      for (bool extended = type == 'S' && h[482] != 0; extended; data_at += kBlock) {
        if (data_at + kBlock > size_) fail("the file ends inside a sparse header at byte " + std::to_string(data_at));
        Header ext{};
        read_exact(data_at, ext);
        extended = ext[504] != 0;
      }
      std::string member = next_name ? *next_name : header_name(h);
      if (data_size > size_ - data_at || round_up(data_size) > size_ - data_at) {
        fail("member " + member + " claims " + std::to_string(data_size) + " bytes at byte " + std::to_string(data_at) +
             ", past the end of the file (" + std::to_string(size_) + " bytes): truncated or corrupt");
      }
      at_ = data_at + round_up(data_size);
      switch (type) {
        case 'x': {  // pax: records for the next member
          parse_pax(data_at, data_size, next_name, next_size, next_sparse);
          continue;  // keeps next_* for the member it describes
        }
        case 'L':  // GNU long name for the next member
          next_name = read_text(data_at, data_size, "long name");
          while (!next_name->empty() && next_name->back() == '\0') next_name->pop_back();
          continue;
        case '0': case '\0': case '7':  // regular (and contiguous) files: the samples (`regular`)
          if (!safe_path(member)) fail("member " + member + ": a path that is absolute or climbs out with ..");
          out.push_back({std::move(member), data_at, data_size, next_sparse ? kSparse : ""});
          break;
        // A link or a sparse member holds no bytes of its own (or not all of
        // them) at its offset: listed as unreadable, not read as nothing (a
        // sample that then has "no image member") or as the wrong bytes.
        case '1': case '2': case 'S': {
          if (!safe_path(member)) fail("member " + member + ": a path that is absolute or climbs out with ..");
          const char* why = type == '1'   ? "a hard link, which Conveyor does not follow (tar --hard-dereference, or conveyor pack)"
                            : type == '2' ? "a symbolic link, which Conveyor does not follow (tar --dereference, or conveyor pack)"
                                          : kSparse;
          out.push_back({std::move(member), data_at, type == 'S' ? data_size : 0, why});
          break;
        }
        default:  // directories, devices, FIFOs, 'g' global and 'K' GNU long-link headers
          break;
      }
      next_name.reset();
      next_size = kNoSize;
      next_sparse = false;
    }
    if (at_ < size_) fail("the file ends inside a header at byte " + std::to_string(at_));
    // tar reads on with a warning; a shard still being written or copied, or
    // cut at a member boundary, would read as fewer samples without a word.
    fail("no end-of-archive marker after byte " + std::to_string(at_) + ": cut short, or still being written");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw TarError(name_ + ": " + what); }

  // `cat a.tar b.tar` leaves b's members behind a's end marker, where tar
  // (without -i) and this scanner stop: b's samples would be lost without a
  // word. Behind the marker a well-formed archive holds only zeros (its
  // padding to a record: 20 blocks for GNU tar and Python's tarfile, but tar
  // -b sets any other, and the first zero block may be a record's last, so no
  // fixed window will do). So every block to the end of the file is looked at,
  // in 64 KiB reads: a record's padding in a plain shard, once per index.
  void refuse_joined_archive(std::uint64_t marker) {
    constexpr std::uint64_t kChunk = 128 * kBlock;
    std::vector<unsigned char> chunk;
    for (std::uint64_t at = marker + kBlock; at + kBlock <= size_;) {
      const std::uint64_t blocks = std::min<std::uint64_t>(kChunk, size_ - at) / kBlock;
      chunk.resize(blocks * kBlock);
      read_exact(at, chunk);
      for (std::uint64_t b = 0; b < blocks; ++b, at += kBlock) {
        Header h{};
        std::memcpy(h.data(), chunk.data() + b * kBlock, kBlock);
        if (!all_zero(h) && checksum_ok(h)) {
          fail("a tar header at byte " + std::to_string(at) + ", after the end-of-archive marker at byte " +
               std::to_string(marker) + ": archives joined with cat? (tar --concatenate them, or conveyor pack)");
        }
      }
    }
  }

  void read_exact(std::uint64_t offset, std::span<unsigned char> out) {
    const auto got = read_(offset, std::as_writable_bytes(out));
    if (got != out.size()) fail("read " + std::to_string(got) + " of " + std::to_string(out.size()) + " bytes at byte " + std::to_string(offset));
  }

  static std::string header_name(const Header& h) {
    std::string n(field(h, 0, 100));
    const bool ustar = std::memcmp(h.data() + 257, "ustar", 5) == 0;
    const bool gnu = std::memcmp(h.data() + 257, "ustar  ", 8) == 0;
    if (ustar && !gnu) {
      const auto prefix = field(h, 345, 155);
      if (!prefix.empty()) n = std::string(prefix) + "/" + n;
    }
    return n;
  }

  std::string read_text(std::uint64_t offset, std::uint64_t size, const char* what) {
    if (size > kMaxMetadata) fail(std::string(what) + " header of " + std::to_string(size) + " bytes (over 1 MiB) at byte " + std::to_string(offset));
    std::string s(size, '\0');
    read_exact(offset, std::span(reinterpret_cast<unsigned char*>(s.data()), s.size()));
    return s;
  }

  // Records "LEN key=value\n", LEN counting the whole record.
  void parse_pax(std::uint64_t offset, std::uint64_t size, std::optional<std::string>& path,
                 std::uint64_t& file_size, bool& sparse) {
    const std::string text = read_text(offset, size, "pax");
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] == '\0') break;  // padding some writers leave
      std::size_t len = 0, j = i;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9' && len < kMaxMetadata) len = len * 10 + std::size_t(text[j++] - '0');
      if (j == i || j >= text.size() || text[j] != ' ' || len <= j - i + 1 || len > text.size() - i || text[i + len - 1] != '\n') {
        fail("pax header at byte " + std::to_string(offset) + ": a record does not parse");
      }
      const std::string_view record(text.data() + j + 1, len - (j - i) - 2);
      const auto eq = record.find('=');
      if (eq == std::string_view::npos) fail("pax header at byte " + std::to_string(offset) + ": a record without '='");
      const auto key = record.substr(0, eq), value = record.substr(eq + 1);
      if (key == "path") path = std::string(value);
      if (key.starts_with("GNU.sparse.")) sparse = true;
      if (key == "size") {
        std::uint64_t v = 0;
        if (value.empty() || value.size() > 19) fail("pax header at byte " + std::to_string(offset) + ": bad size " + std::string(value));
        for (char c : value) {
          if (c < '0' || c > '9') fail("pax header at byte " + std::to_string(offset) + ": bad size " + std::string(value));
          v = v * 10 + std::uint64_t(c - '0');
        }
        file_size = v;
      }
      i += len;
    }
  }

  const ReadAt& read_;
  std::uint64_t size_;
  const std::string& name_;
  std::uint64_t at_ = 0;
};

}  // namespace

std::string tar_header(const std::string& name, std::uint64_t size, char type) {
  if (name.empty() || name.size() > 100) throw TarError("tar: member name '" + name + "' is not 1..100 bytes");
  if (size > 077777777777ULL) throw TarError("tar: member " + name + " of " + std::to_string(size) + " bytes is over 8 GiB");
  std::string h(kBlock, '\0');
  const auto put = [&](std::size_t at, std::size_t width, std::uint64_t value) {  // octal, NUL-terminated
    char buf[24];
    std::snprintf(buf, sizeof buf, "%0*llo", int(width - 1), static_cast<unsigned long long>(value));
    h.replace(at, width - 1, buf);
  };
  h.replace(0, name.size(), name);
  put(100, 8, 0644);  // mode
  put(108, 8, 0);     // uid
  put(116, 8, 0);     // gid
  put(124, 12, size);
  put(136, 12, 0);    // mtime
  h[156] = type;
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  std::uint64_t sum = 0;
  for (unsigned char c : h) sum += c;
  put(148, 7, sum);  // six digits, NUL, then the space already there
  return h;
}

std::size_t tar_padding(std::uint64_t size) { return std::size_t(round_up(size) - size); }

std::vector<TarMember> scan_tar(const ReadAt& read, std::uint64_t file_size, const std::string& name) {
  return Scanner(read, file_size, name).run();
}

std::vector<TarMember> scan_tar(const std::filesystem::path& file) {
  const std::string name = file.string();
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw TarError(name + ": " + std::generic_category().message(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw TarError(name + ": " + std::generic_category().message(errno));
  if (!S_ISREG(st.st_mode)) throw TarError(name + ": not a regular file");
  const ReadAt read = [&](std::uint64_t offset, std::span<std::byte> out) {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw TarError(name + ": " + std::generic_category().message(errno));
      if (n == 0) break;
      done += std::size_t(n);
    }
    return done;
  };
  return scan_tar(read, std::uint64_t(st.st_size), name);
}

}  // namespace conveyor
