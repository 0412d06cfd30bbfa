#include "data/npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "data/quote_bytes.h"

namespace conveyor {

// The data is handed over as it lies in the file, which is correct only on a little-endian host.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// Longest header read_npy reads. A real one for the four types is well under 1 KiB even with dozens
// of dimensions; the limit keeps a hostile length field from costing memory.
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{1} << 20;
// numpy pads the header so that the data starts at a multiple of this.
constexpr std::size_t kHeaderAlign = 64;
// Python's whitespace between tokens (newlines included: the dict is inside brackets).
constexpr std::string_view kSpace = " \t\n\r\f\v";

[[noreturn]] void fail(const std::string& name, const std::string& reason) {
  throw NpyError(name + ": " + reason);
}

// As Python prints a tuple: "()", "(5,)", "(10, 28, 28)".
std::string shape_text(std::span<const std::size_t> shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string shape_of_type(std::span<const std::size_t> shape, NpyType type) {
  return "shape " + shape_text(shape) + " of " + npy_type_name(type);
}

const char* descr_of(NpyType type) {
  switch (type) {
    case NpyType::uint8: return "|u1";
    case NpyType::int32: return "<i4";
    case NpyType::int64: return "<i8";
    case NpyType::float32: return "<f4";
  }
  return "?";
}

// Bytes in one row and in the whole array. The row is computed first, so that NpyArray's row
// accessors cannot overflow even when there are no rows. A 0-d shape is one element.
struct ArraySize {
  std::size_t row_bytes = 0;
  std::size_t total_bytes = 0;
};

std::optional<ArraySize> array_size(NpyType type, std::span<const std::size_t> shape) {
  ArraySize s;
  s.row_bytes = npy_type_size(type);
  for (std::size_t i = 1; i < shape.size(); ++i) {
    if (__builtin_mul_overflow(s.row_bytes, shape[i], &s.row_bytes)) return std::nullopt;
  }
  const std::size_t rows = shape.empty() ? 1 : shape[0];
  if (__builtin_mul_overflow(rows, s.row_bytes, &s.total_bytes)) return std::nullopt;
  return s;
}

// The header dict's three values as written; which of them are present.
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::size_t>> shape;
};

// A recursive-descent parser for the one Python literal a .npy header holds: a dict with string
// keys whose values are a string, True/False, or a tuple of non-negative integers. Keys in any
// order, either quote, whitespace between any two tokens, trailing commas. Strings have no escapes.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  Header parse() {
    skip_space();
    if (!take('{')) fail("not a Python dict: expected '{', found " + found());
    Header h;
    for (;;) {
      skip_space();
      if (take('}')) break;
      if (peek() != '\'' && peek() != '"') fail("expected a quoted key or '}', found " + found());
      const std::string_view key = parse_string();
      skip_space();
      if (!take(':')) fail("expected ':' after key " + quote_bytes(key) + ", found " + found());
      skip_space();
      if (key == "descr") {
        if (h.descr) duplicate(key);
        if (peek() == '[') fail("'descr' is a list: structured dtypes are not supported");
        if (peek() != '\'' && peek() != '"') fail("'descr' must be a string, found " + found());
        h.descr = std::string(parse_string());
      } else if (key == "fortran_order") {
        if (h.fortran_order) duplicate(key);
        h.fortran_order = parse_bool(key);
      } else if (key == "shape") {
        if (h.shape) duplicate(key);
        h.shape = parse_shape();
      } else {
        fail("unexpected key " + quote_bytes(key) + " (expected 'descr', 'fortran_order' and 'shape')");
      }
      skip_space();
      if (take(',')) continue;
      if (take('}')) break;
      fail("expected ',' or '}' after the value of " + quote_bytes(key) + ", found " + found());
    }
    skip_space();
    if (pos_ < text_.size()) fail("unexpected " + found() + " after the closing '}'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const { conveyor::fail(name_, "header: " + reason); }
  [[noreturn]] void duplicate(std::string_view key) const { fail("duplicate key " + quote_bytes(key)); }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool take(char c) {
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void skip_space() {
    while (pos_ < text_.size() && kSpace.find(text_[pos_]) != std::string_view::npos) ++pos_;
  }
  // What stands at pos_, for messages: "'x' at byte 12" or "the end of the header".
  std::string found() const {
    if (pos_ >= text_.size()) return "the end of the header";
    return quote_bytes(text_.substr(pos_, 1)) + " at byte " + std::to_string(pos_);
  }

  // At a quote: the string's contents, up to the same quote on the same line.
  std::string_view parse_string() {
    const char quote = text_[pos_];
    const std::size_t begin = pos_ + 1;
    const std::size_t end = text_.find_first_of(std::string{quote, '\n', '\\'}, begin);
    if (end == std::string_view::npos || text_[end] == '\n') {
      fail("unterminated string at byte " + std::to_string(pos_));
    }
    if (text_[end] == '\\') {
      fail("escape sequences in strings are not supported (byte " + std::to_string(end) + ")");
    }
    pos_ = end + 1;
    return text_.substr(begin, end - begin);
  }

  bool parse_bool(std::string_view key) {
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (text_.substr(pos_).starts_with(word)) {
        const char next = pos_ + word.size() < text_.size() ? text_[pos_ + word.size()] : '\0';
        const bool identifier = (next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
                                (next >= '0' && next <= '9') || next == '_';
        if (!identifier) {
          pos_ += word.size();
          return value;
        }
      }
    }
    fail(quote_bytes(key) + " must be True or False, found " + found());
  }

  // A tuple of non-negative decimal integers, each optionally with Python 2's long suffix 'L' (old
  // numpy wrote "(10L, 3L)"). "(5)" is an int, not a tuple, so it is refused as numpy does.
  std::vector<std::size_t> parse_shape() {
    if (!take('(')) fail("'shape' must be a tuple, found " + found());
    std::vector<std::size_t> shape;
    bool comma = false;
    for (;;) {
      skip_space();
      if (take(')')) break;
      if (!shape.empty() && !comma) fail("expected ',' or ')' in 'shape', found " + found());
      shape.push_back(parse_dimension());
      if (!take('L')) take('l');
      skip_space();
      comma = take(',');
    }
    if (shape.size() == 1 && !comma) {
      fail("'shape' (" + std::to_string(shape[0]) + ") is not a tuple: a 1-tuple needs a comma, (" +
           std::to_string(shape[0]) + ",)");
    }
    return shape;
  }

  std::size_t parse_dimension() {
    if (peek() == '-') fail("'shape' has a negative dimension at byte " + std::to_string(pos_));
    const std::size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (pos_ == begin) fail("expected a dimension (a non-negative integer) in 'shape', found " + found());
    const std::string_view digits = text_.substr(begin, pos_ - begin);
    std::size_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) {
      fail("'shape' dimension " + quote_bytes(digits) + " is too large");
    }
    return value;
  }

  std::string_view text_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

// The type a descr names. A byte-order mark is optional; '=' (native) is little-endian here, and
// '>' and '|' matter only for multi-byte types.
NpyType parse_descr(std::string_view descr, const std::string& name) {
  std::string_view code = descr;
  char order = '=';
  if (!code.empty() && std::string_view("<>|=").find(code.front()) != std::string_view::npos) {
    order = code.front();
    code.remove_prefix(1);
  }
  NpyType type;
  if (code == "u1") {
    type = NpyType::uint8;
  } else if (code == "i4") {
    type = NpyType::int32;
  } else if (code == "i8") {
    type = NpyType::int64;
  } else if (code == "f4") {
    type = NpyType::float32;
  } else {
    fail(name, "descr " + quote_bytes(descr) +
                   " is not supported (supported: '|u1' uint8, '<i4' int32, '<i8' int64, '<f4' float32)");
  }
  if (npy_type_size(type) > 1) {
    if (order == '>') fail(name, "descr " + quote_bytes(descr) + ": big-endian data is not supported");
    if (order == '|') fail(name, "descr " + quote_bytes(descr) + ": byte order '|' is only for 1-byte types");
  }
  return type;
}

// Reads up to n bytes; returns how many arrived (fewer at the end of the file). Throws NpyError on
// an I/O error.
std::size_t read_up_to(std::ifstream& in, void* out, std::size_t n, const std::string& name) {
  if (n == 0) return 0;
  errno = 0;
  in.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
  if (in.bad()) {
    const int err = errno;
    fail(name, std::string("read error") + (err != 0 ? ": " + std::generic_category().message(err) : ""));
  }
  return static_cast<std::size_t>(in.gcount());
}

std::uint32_t little_endian(const unsigned char* p, std::size_t n) {
  std::uint32_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::size_t npy_type_size(NpyType type) {
  switch (type) {
    case NpyType::uint8: return 1;
    case NpyType::int32: return 4;
    case NpyType::int64: return 8;
    case NpyType::float32: return 4;
  }
  return 0;
}

const char* npy_type_name(NpyType type) {
  switch (type) {
    case NpyType::uint8: return "uint8";
    case NpyType::int32: return "int32";
    case NpyType::int64: return "int64";
    case NpyType::float32: return "float32";
  }
  return "unknown";
}

std::size_t NpyArray::rows() const { return shape.empty() ? 0 : shape[0]; }

std::size_t NpyArray::row_elements() const {
  std::size_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::size_t NpyArray::row_bytes() const { return row_elements() * npy_type_size(type); }

std::span<const std::byte> NpyArray::row(std::size_t i) const {
  const std::size_t bytes = row_bytes();
  if (i >= rows() || data.size() / (i + 1) < bytes) {
    throw std::out_of_range("npy: row " + std::to_string(i) + " is out of range (" + std::to_string(rows()) +
                            " rows, " + std::to_string(data.size()) + " data bytes)");
  }
  return std::span<const std::byte>(data).subspan(i * bytes, bytes);
}

NpyArray read_npy(const fs::path& file) {
  const std::string name = file.string();
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (st.type() == fs::file_type::not_found) {
    fail(name, "cannot open: " + std::make_error_code(std::errc::no_such_file_or_directory).message());
  }
  if (ec) fail(name, "cannot open: " + ec.message());
  if (fs::is_directory(st)) fail(name, "cannot open: is a directory");
  // A FIFO or device could block or never end.
  if (!fs::is_regular_file(st)) fail(name, "cannot open: not a regular file");

  errno = 0;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    fail(name, std::string("cannot open") + (err != 0 ? ": " + std::generic_category().message(err) : ""));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (!in || end < 0) fail(name, "cannot determine the file size");
  const auto file_bytes = static_cast<std::uint64_t>(end);
  const std::string too_short = "file is " + std::to_string(file_bytes) + " bytes, too short for a .npy header";

  // Magic, version, header length.
  unsigned char lead[12] = {};
  const std::size_t got = read_up_to(in, lead, 8, name);
  const std::string_view magic(reinterpret_cast<const char*>(lead), std::min<std::size_t>(got, kMagic.size()));
  if (magic != kMagic.substr(0, magic.size())) fail(name, "not a .npy file (bad magic)");
  if (got < 8) fail(name, too_short);
  const unsigned major = lead[6], minor = lead[7];
  if (major < 1 || major > 3 || minor != 0) {
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (supported: 1.0, 2.0, 3.0)");
  }
  const std::size_t length_bytes = major == 1 ? 2 : 4;  // uint16 in 1.0, uint32 after
  if (read_up_to(in, lead + 8, length_bytes, name) < length_bytes) fail(name, too_short);
  const std::uint64_t header_bytes = little_endian(lead + 8, length_bytes);
  const std::uint64_t prefix_bytes = 8 + length_bytes;
  if (file_bytes < prefix_bytes || header_bytes > file_bytes - prefix_bytes) {
    fail(name, "header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                   std::to_string(file_bytes) + " bytes)");
  }
  if (header_bytes > kMaxHeaderBytes) {
    fail(name, "header length " + std::to_string(header_bytes) + " is over the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes");
  }

  std::string text(static_cast<std::size_t>(header_bytes), '\0');
  if (read_up_to(in, text.data(), text.size(), name) < text.size()) fail(name, "file ended inside the header");
  Header h = HeaderParser(text, name).parse();
  if (!h.descr) fail(name, "header: missing 'descr'");
  if (!h.fortran_order) fail(name, "header: missing 'fortran_order'");
  if (!h.shape) fail(name, "header: missing 'shape'");

  NpyArray array;
  array.type = parse_descr(*h.descr, name);
  if (*h.fortran_order) fail(name, "fortran_order True is not supported: save with np.ascontiguousarray");
  array.shape = std::move(*h.shape);
  if (array.shape.empty()) fail(name, "shape (): 0-d arrays are not supported (the first axis must be the rows)");
  const std::optional<ArraySize> size = array_size(array.type, array.shape);
  if (!size) fail(name, shape_of_type(array.shape, array.type) + " is too large: its byte size overflows size_t");

  // The header check above keeps this from wrapping.
  const std::uint64_t data_bytes = file_bytes - prefix_bytes - header_bytes;
  const std::string needs =
      shape_of_type(array.shape, array.type) + " needs " + std::to_string(size->total_bytes);
  if (data_bytes < size->total_bytes) fail(name, "data is " + std::to_string(data_bytes) + " bytes, " + needs);
  if (data_bytes > size->total_bytes) {
    fail(name, std::to_string(data_bytes - size->total_bytes) + " trailing bytes after the data: " + needs);
  }
  array.data.resize(size->total_bytes);
  const std::size_t data_got = read_up_to(in, array.data.data(), array.data.size(), name);
  if (data_got < array.data.size()) {  // the file shrank since its size was taken
    fail(name, "data is " + std::to_string(data_got) + " bytes, " + needs);
  }
  return array;
}

void write_npy(const fs::path& file, NpyType type, std::span<const std::size_t> shape,
               std::span<const std::byte> data) {
  const std::string name = file.string();
  const std::optional<ArraySize> size = array_size(type, shape);
  if (!size) {
    throw std::invalid_argument(name + ": " + shape_of_type(shape, type) +
                                " is too large: its byte size overflows size_t");
  }
  if (data.size() != size->total_bytes) {
    throw std::invalid_argument(name + ": data is " + std::to_string(data.size()) + " bytes, " +
                                shape_of_type(shape, type) + " needs " + std::to_string(size->total_bytes));
  }

  std::string header = std::string("{'descr': '") + descr_of(type) + "', 'fortran_order': False, 'shape': " +
                       shape_text(shape) + ", }";
  std::size_t prefix_bytes = 10;
  std::size_t padded = (prefix_bytes + header.size() + 1 + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  if (padded - prefix_bytes > std::numeric_limits<std::uint16_t>::max()) {  // numpy's fallback to 2.0
    prefix_bytes = 12;
    padded = (prefix_bytes + header.size() + 1 + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  }
  header.append(padded - prefix_bytes - header.size() - 1, ' ');
  header += '\n';
  if (header.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument(name + ": shape " + shape_text(shape) + " makes a header over 4 GiB");
  }
  std::string prefix(kMagic);
  prefix += static_cast<char>(prefix_bytes == 10 ? 1 : 2);
  prefix += '\0';
  for (std::size_t i = 0; i < prefix_bytes - 8; ++i) {  // the header length, little-endian
    prefix += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }

  errno = 0;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) {
    const int err = errno;
    fail(name, std::string("cannot create") + (err != 0 ? ": " + std::generic_category().message(err) : ""));
  }
  out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (!data.empty()) {
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  out.close();
  if (!out) {
    const int err = errno;
    fail(name, std::string("write failed") + (err != 0 ? ": " + std::generic_category().message(err) : ""));
  }
}

std::vector<std::int64_t> read_npy_labels(const fs::path& file) {
  const NpyArray array = read_npy(file);
  const std::string name = file.string();
  if (array.shape.size() != 1) fail(name, "labels must be a 1-d array, got shape " + shape_text(array.shape));
  std::vector<std::int64_t> labels(array.rows());
  switch (array.type) {
    case NpyType::uint8:
      for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = std::to_integer<std::uint8_t>(array.data[i]);
      break;
    case NpyType::int32:
      for (std::size_t i = 0; i < labels.size(); ++i) {
        std::int32_t v;
        std::memcpy(&v, array.data.data() + i * sizeof v, sizeof v);
        labels[i] = v;
      }
      break;
    case NpyType::int64:
      if (!labels.empty()) std::memcpy(labels.data(), array.data.data(), array.data.size());
      break;
    case NpyType::float32:
      fail(name, "labels must be an integer array (uint8, int32 or int64), got float32");
  }
  return labels;
}

}  // namespace conveyor
