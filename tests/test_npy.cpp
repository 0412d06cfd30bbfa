#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "catch_compat.h"

#include "pipeline/pipeline.h"
#include "data/array_source.h"
#include "data/npy.h"
#include "temp_dir.h"

using namespace conveyor;
using conveyor::test::TempDir;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// A fresh folder under the system temp dir, removed with everything in it on destruction.

void write_file(const fs::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  REQUIRE(out);
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A .npy file's bytes, built by hand: magic, version major.minor, the header length (uint16 LE for
// 1.x, uint32 LE after) and the header exactly as given (no padding added), then data.
std::string npy_bytes(int major, const std::string& header, const std::string& data, int minor = 0) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  const int length_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < length_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::vector<std::byte> as_bytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

std::string as_string(const std::vector<std::byte>& bytes) {
  std::string out(bytes.size(), '\0');
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// read_npy(file) must throw an NpyError whose what() is one line: the file name, ": ", and a
// message containing `reason`.
void require_npy_error(const fs::path& file, const std::string& reason) {
  INFO("file " << file << ", expected reason: " << reason);
  try {
    (void)read_npy(file);
  } catch (const NpyError& e) {
    const std::string what = e.what();
    INFO("what(): " << what);
    CHECK(what.starts_with(file.string() + ": "));
    CHECK_THAT(what, Contains(reason));
    CHECK(what.find('\n') == std::string::npos);
    return;
  }
  FAIL("read_npy did not throw");
}

// Writes `bytes` as `file` and expects read_npy to reject it for `reason`.
void require_rejected(const fs::path& file, const std::string& bytes, const std::string& reason) {
  write_file(file, bytes);
  require_npy_error(file, reason);
}

// Reads `file`: it must parse into a consistent array or throw NpyError naming the file. Anything
// else (another exception, a crash, a sanitizer report) fails the test.
void read_or_npy_error(const fs::path& file) {
  try {
    const NpyArray a = read_npy(file);
    REQUIRE(!a.shape.empty());
    REQUIRE(a.data.size() == a.rows() * a.row_bytes());
  } catch (const NpyError& e) {
    const std::string what = e.what();
    REQUIRE(what.starts_with(file.string() + ": "));
    REQUIRE(what.find('\n') == std::string::npos);
  }
}

const std::string kF4Header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

}  // namespace

TEST_CASE("npy type sizes and names") {
  CHECK(npy_type_size(NpyType::uint8) == 1);
  CHECK(npy_type_size(NpyType::int32) == 4);
  CHECK(npy_type_size(NpyType::int64) == 8);
  CHECK(npy_type_size(NpyType::float32) == 4);
  CHECK(std::string(npy_type_name(NpyType::uint8)) == "uint8");
  CHECK(std::string(npy_type_name(NpyType::int32)) == "int32");
  CHECK(std::string(npy_type_name(NpyType::int64)) == "int64");
  CHECK(std::string(npy_type_name(NpyType::float32)) == "float32");
}

TEST_CASE("npy round trip for each type and 1-d 2-d 4-d shapes including 0 rows") {
  TempDir dir;
  const std::vector<std::vector<std::size_t>> shapes = {{7}, {3, 5}, {2, 3, 4, 5}, {0}, {0, 28, 28}, {4, 0}};
  const NpyType types[] = {NpyType::uint8, NpyType::int32, NpyType::int64, NpyType::float32};
  std::mt19937 rng(1);
  for (const NpyType type : types) {
    for (const auto& shape : shapes) {
      INFO(npy_type_name(type) << " shape of " << shape.size() << " dims, rows " << shape[0]);
      std::size_t elements = 1;
      for (std::size_t d : shape) elements *= d;
      std::vector<std::byte> data(elements * npy_type_size(type));
      for (auto& b : data) b = static_cast<std::byte>(rng());
      const fs::path file = dir / "a.npy";
      write_npy(file, type, shape, data);

      // The layout numpy writes: version 1.0, data aligned to 64 bytes, header ending in '\n'.
      const std::string raw = read_file(file);
      REQUIRE(raw.size() > 10);
      CHECK(raw.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
      const std::size_t header_bytes =
          static_cast<unsigned char>(raw[8]) | static_cast<std::size_t>(static_cast<unsigned char>(raw[9])) << 8;
      CHECK((10 + header_bytes) % 64 == 0);
      CHECK(raw[10 + header_bytes - 1] == '\n');
      CHECK(raw.size() == 10 + header_bytes + data.size());

      const NpyArray a = read_npy(file);
      CHECK(a.type == type);
      CHECK(a.shape == shape);
      CHECK(a.data == data);
      CHECK(a.rows() == shape[0]);
      std::size_t row_elements = 1;
      for (std::size_t i = 1; i < shape.size(); ++i) row_elements *= shape[i];
      CHECK(a.row_elements() == row_elements);
      CHECK(a.row_bytes() == row_elements * npy_type_size(type));
      if (a.rows() > 0 && a.row_bytes() > 0) {
        const auto last = a.row(a.rows() - 1);
        CHECK(last.size() == a.row_bytes());
        CHECK(last.data() == a.data.data() + (a.rows() - 1) * a.row_bytes());
      }
      CHECK_THROWS_AS(a.row(a.rows()), std::out_of_range);
    }
  }
}

TEST_CASE("npy reads the bytes numpy 1.24 writes") {
  // np.save output, byte for byte: numpy 1.24 pads its version 1.0 header to 118 bytes.
  TempDir dir;
  const auto numpy_file = [](const std::string& dict, const std::string& data) {
    return npy_bytes(1, dict + std::string(118 - 1 - dict.size(), ' ') + "\n", data);
  };
  const fs::path file = dir / "numpy.npy";

  // np.array([[1, -2], [3, 4]], dtype=np.int32)
  write_file(file, numpy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }",
                              bytes_of<std::int32_t>({1, -2, 3, 4})));
  const NpyArray a = read_npy(file);
  CHECK(a.type == NpyType::int32);
  CHECK(a.shape == std::vector<std::size_t>{2, 2});
  CHECK(as_string(a.data) == bytes_of<std::int32_t>({1, -2, 3, 4}));
  CHECK(as_string({a.row(1).begin(), a.row(1).end()}) == bytes_of<std::int32_t>({3, 4}));

  // np.array([1.5, -2.0], dtype=np.float32).reshape(2, 1)
  write_file(file, numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }",
                              bytes_of<float>({1.5f, -2.0f})));
  const NpyArray f = read_npy(file);
  CHECK(f.type == NpyType::float32);
  CHECK(f.shape == std::vector<std::size_t>{2, 1});
  CHECK(f.row_bytes() == 4);
  CHECK(as_string(f.data) == bytes_of<float>({1.5f, -2.0f}));

  // np.array([7, -1], dtype=np.int64) and np.arange(3, dtype=np.uint8), as labels
  write_file(file, numpy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                              bytes_of<std::int64_t>({7, -1})));
  CHECK(read_npy_labels(file) == std::vector<std::int64_t>{7, -1});
  write_file(file, numpy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }",
                              std::string("\0\1\2", 3)));
  CHECK(read_npy_labels(file) == std::vector<std::int64_t>{0, 1, 2});
}

TEST_CASE("npy reads version 2.0 and 3.0 headers") {
  TempDir dir;
  const std::string data = bytes_of<float>({0.5f, 1, 2, 3, 4, -5});
  for (const int major : {2, 3}) {
    INFO("version " << major << ".0");
    const fs::path file = dir / "v.npy";
    write_file(file, npy_bytes(major, kF4Header + std::string(50, ' ') + "\n", data));
    const NpyArray a = read_npy(file);
    CHECK(a.type == NpyType::float32);
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    CHECK(as_string(a.data) == data);
  }
}

TEST_CASE("npy header parsing takes double quotes odd whitespace any key order and trailing commas") {
  TempDir dir;
  const std::string i4 = bytes_of<std::int32_t>({1, 2, 3, 4, 5, -6});
  const std::vector<std::string> headers = {
      "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<i4\"}",
      "  {\t'fortran_order'  :False ,\n 'shape':( 2 ,3 , ) ,'descr':'<i4',}   \n",
      "{'descr':'<i4','fortran_order':False,'shape':(2,3)}",
      "{\n'shape' : (2L, 3L),\r\n'descr' : \"=i4\",\f'fortran_order' : False ,\n}\n",
      "{'descr': 'i4', 'fortran_order': False, 'shape': (2, 3,), }" + std::string(20, ' ') + "\n",
  };
  for (const auto& header : headers) {
    INFO("header: " << header);
    const fs::path file = dir / "h.npy";
    write_file(file, npy_bytes(1, header, i4));
    const NpyArray a = read_npy(file);
    CHECK(a.type == NpyType::int32);
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    CHECK(as_string(a.data) == i4);
  }

  SECTION("1-d shapes and every uint8 spelling") {
    for (const std::string descr : {"|u1", "<u1", "=u1", "u1", ">u1"}) {
      INFO("descr " << descr);
      const fs::path file = dir / "u1.npy";
      const std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (5,)}";
      write_file(file, npy_bytes(1, header, "abcde"));
      const NpyArray a = read_npy(file);
      CHECK(a.type == NpyType::uint8);
      CHECK(a.shape == std::vector<std::size_t>{5});
      CHECK(a.row_bytes() == 1);
      CHECK(as_string(a.data) == "abcde");
    }
  }
}

TEST_CASE("npy labels from int32 int64 and uint8 arrays") {
  TempDir dir;
  const fs::path file = dir / "labels.npy";
  const std::vector<std::int64_t> expected = {3, 0, -1, 2147483647, -2147483647 - 1};

  const std::vector<std::int32_t> i32(expected.begin(), expected.end());
  write_npy(file, NpyType::int32, std::vector<std::size_t>{i32.size()}, as_bytes(bytes_of(i32)));
  CHECK(read_npy_labels(file) == expected);

  std::vector<std::int64_t> i64 = expected;
  i64.push_back(std::int64_t{1} << 40);
  write_npy(file, NpyType::int64, std::vector<std::size_t>{i64.size()}, as_bytes(bytes_of(i64)));
  CHECK(read_npy_labels(file) == i64);

  write_npy(file, NpyType::uint8, std::vector<std::size_t>{3}, as_bytes(std::string("\x00\x07\xff", 3)));
  CHECK(read_npy_labels(file) == std::vector<std::int64_t>{0, 7, 255});

  write_npy(file, NpyType::int64, std::vector<std::size_t>{0}, {});
  CHECK(read_npy_labels(file).empty());
}

TEST_CASE("npy labels reject float and multi-dimensional arrays") {
  TempDir dir;
  const fs::path file = dir / "bad_labels.npy";
  write_npy(file, NpyType::float32, std::vector<std::size_t>{2}, as_bytes(bytes_of<float>({1, 2})));
  REQUIRE_THROWS_WITH(read_npy_labels(file), Contains(file.string() + ": ") &&
                                                 Contains("labels must be an integer array") &&
                                                 Contains("got float32"));
  write_npy(file, NpyType::int64, std::vector<std::size_t>{2, 1}, as_bytes(bytes_of<std::int64_t>({1, 2})));
  REQUIRE_THROWS_WITH(read_npy_labels(file),
                      Contains(file.string() + ": ") && Contains("labels must be a 1-d array, got shape (2, 1)"));
  REQUIRE_THROWS_AS(read_npy_labels(dir / "missing.npy"), NpyError);
}

TEST_CASE("npy file errors name the file and the reason") {
  TempDir dir;
  require_npy_error(dir / "missing.npy", "cannot open: No such file or directory");
  require_npy_error(dir.path(), "cannot open: is a directory");
  const std::string data = bytes_of<float>({0, 1, 2, 3, 4, 5});
  const std::string valid = npy_bytes(1, kF4Header + "\n", data);

  SECTION("magic, version and length") {
    require_rejected(dir / "empty.npy", "", "file is 0 bytes, too short for a .npy header");
    require_rejected(dir / "text.npy", "x,y\n1,2\n", "not a .npy file (bad magic)");
    require_rejected(dir / "short.npy", "\x93NUM", "file is 4 bytes, too short for a .npy header");
    require_rejected(dir / "nolength.npy", std::string("\x93NUMPY\x01\x00\x05", 9), "file is 9 bytes, too short");
    require_rejected(dir / "v4.npy", npy_bytes(4, kF4Header, data), "unsupported .npy format version 4.0");
    require_rejected(dir / "v0.npy", npy_bytes(0, kF4Header, data), "unsupported .npy format version 0.0");
    require_rejected(dir / "v11.npy", npy_bytes(1, kF4Header, data, 1), "unsupported .npy format version 1.1");
    std::string long_header = valid;
    long_header[8] = '\xe8';  // 1000
    long_header[9] = '\x03';
    require_rejected(dir / "len.npy", long_header, "header length 1000 runs past the end of the file");
    std::string huge = npy_bytes(2, kF4Header, data);
    huge[8] = huge[9] = huge[10] = huge[11] = '\xff';
    require_rejected(dir / "huge.npy", huge, "header length 4294967295 runs past the end of the file");
  }

  SECTION("header syntax") {
    const auto rejected = [&](const std::string& header, const std::string& reason) {
      require_rejected(dir / "header.npy", npy_bytes(1, header, data), reason);
    };
    rejected("{'descr': '<f4', 'fortran_order': False, }", "header: missing 'shape'");
    rejected("{'shape': (2, 3), 'fortran_order': False}", "header: missing 'descr'");
    rejected("{'descr': '<f4', 'shape': (2, 3)}", "header: missing 'fortran_order'");
    rejected("", "header: not a Python dict: expected '{', found the end of the header");
    rejected("descr: <f4", "header: not a Python dict");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "header: expected ',' or '}'");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", "header: unexpected 'x' at byte");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (2, 3)}",
             "header: duplicate key 'shape'");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}",
             "header: unexpected key 'extra'");
    rejected("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3)}",
             "header: expected ':' after key 'descr'");
    rejected("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}",
             "header: expected ',' or '}' after the value of 'descr', found 'f' at byte 17");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", "header: expected ',' or '}'");
    rejected("{'descr': '<f4\n', 'fortran_order': False, 'shape': (2, 3)}", "header: unterminated string");
    rejected("{'descr': '<f4\\n', 'fortran_order': False, 'shape': (2, 3)}", "header: escape sequences");
    rejected("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3)}",
             "header: 'descr' is a list: structured dtypes are not supported");
    rejected("{'descr': 4, 'fortran_order': False, 'shape': (2, 3)}", "header: 'descr' must be a string");
    rejected("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}",
             "header: 'fortran_order' must be True or False");
    rejected("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3)}",
             "header: 'fortran_order' must be True or False");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", "header: 'shape' must be a tuple");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "header: 'shape' (6) is not a tuple");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}",
             "header: expected ',' or ')' in 'shape'");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}",
             "header: 'shape' has a negative dimension");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3.0)}",
             "header: expected ',' or ')' in 'shape'");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (,)}", "header: expected a dimension");
    rejected("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
             "header: 'shape' dimension '99999999999999999999999' is too large");
  }

  SECTION("descr, fortran_order and shape values") {
    const auto rejected = [&](const std::string& descr, const std::string& fortran, const std::string& shape,
                              const std::string& reason) {
      const std::string header =
          "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }\n";
      require_rejected(dir / "values.npy", npy_bytes(1, header, data), reason);
    };
    rejected(">f4", "False", "(2, 3)", "descr '>f4': big-endian data is not supported");
    rejected(">i8", "False", "(3,)", "descr '>i8': big-endian data is not supported");
    rejected("|i4", "False", "(2, 3)", "descr '|i4': byte order '|' is only for 1-byte types");
    rejected("<f8", "False", "(3,)", "descr '<f8' is not supported (supported: '|u1' uint8");
    rejected("|b1", "False", "(24,)", "descr '|b1' is not supported");
    rejected("<U4", "False", "(6,)", "descr '<U4' is not supported");
    rejected("<f4", "True", "(2, 3)", "fortran_order True is not supported: save with np.ascontiguousarray");
    rejected("<f4", "False", "()", "shape (): 0-d arrays are not supported");
    rejected("<f4", "False", "(4294967296, 4294967296, 16)",
             "shape (4294967296, 4294967296, 16) of float32 is too large: its byte size overflows size_t");
    rejected("<f4", "False", "(0, 4294967296, 4294967296)", "of float32 is too large");
    rejected("<i8", "False", "(2305843009213693952,)", "of int64 is too large");
  }

  SECTION("data section size") {
    const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 28, 28), }\n";
    require_rejected(dir / "x.npy", npy_bytes(1, header, std::string(1000, '\0')),
                     "data is 1000 bytes, shape (10, 28, 28) of float32 needs 31360");
    require_rejected(dir / "x.npy", npy_bytes(1, header, std::string(31360 + 3, '\0')),
                     "3 trailing bytes after the data");
    require_rejected(dir / "x.npy", npy_bytes(1, kF4Header, data.substr(0, 23)),
                     "data is 23 bytes, shape (2, 3) of float32 needs 24");
    // A shape that does not overflow but promises far more than the file holds is refused before
    // anything is allocated.
    require_rejected(dir / "x.npy",
                     npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000000,)}", "ab"),
                     "data is 2 bytes, shape (1000000000000000,) of uint8 needs 1000000000000000");
  }
}

TEST_CASE("npy write errors") {
  TempDir dir;
  const std::vector<std::byte> six(6);
  CHECK_THROWS_AS(write_npy(dir / "w.npy", NpyType::int32, std::vector<std::size_t>{2}, six),
                  std::invalid_argument);
  CHECK_THROWS_WITH(write_npy(dir / "w.npy", NpyType::int32, std::vector<std::size_t>{2}, six),
                    Contains("w.npy: data is 6 bytes, shape (2,) of int32 needs 8"));
  const std::vector<std::size_t> huge = {std::size_t{1} << 40, std::size_t{1} << 40};
  CHECK_THROWS_AS(write_npy(dir / "w.npy", NpyType::uint8, huge, six), std::invalid_argument);
  CHECK_THROWS_WITH(write_npy(dir / "no" / "such" / "dir.npy", NpyType::uint8, std::vector<std::size_t>{6}, six),
                    Contains("dir.npy: cannot create: No such file or directory"));

  // A 0-d array writes (numpy reads it) but read_npy refuses it as a dataset.
  const fs::path scalar = dir / "scalar.npy";
  write_npy(scalar, NpyType::float32, {}, std::vector<std::byte>(4));
  require_npy_error(scalar, "shape (): 0-d arrays are not supported");
}

TEST_CASE("npy truncations and corrupted headers give only NpyError") {
  TempDir dir;
  const fs::path file = dir / "fuzz.npy";
  std::vector<std::string> valid;
  {
    const std::string data = bytes_of<std::int64_t>({1, 2, 3, 4, 5, 6});
    write_npy(file, NpyType::int64, std::vector<std::size_t>{3, 2}, as_bytes(data));
    valid.push_back(read_file(file));
    valid.push_back(npy_bytes(2, "{\"shape\": (6,), 'descr': '<i8', \"fortran_order\": False}\n", data));
  }

  SECTION("every truncation is rejected") {
    for (const std::string& bytes : valid) {
      for (std::size_t length = 0; length < bytes.size(); ++length) {
        INFO("truncated to " << length << " of " << bytes.size() << " bytes");
        write_file(file, bytes.substr(0, length));
        CHECK_THROWS_AS(read_npy(file), NpyError);
      }
    }
  }

  SECTION("random byte changes in the header") {
    std::mt19937 rng(12345);
    for (int round = 0; round < 3000; ++round) {
      std::string bytes = valid[static_cast<std::size_t>(round) % valid.size()];
      const std::size_t header_end = bytes.size() - 48;  // both hold 48 data bytes
      const int changes = 1 + static_cast<int>(rng() % 4);
      for (int c = 0; c < changes; ++c) {
        const std::size_t at = rng() % header_end;
        bytes[at] = rng() % 2 ? static_cast<char>(rng()) : static_cast<char>(bytes[at] ^ (1 << (rng() % 8)));
      }
      INFO("round " << round);
      write_file(file, bytes);
      read_or_npy_error(file);
    }
  }

  SECTION("random headers from dict tokens") {
    const std::vector<std::string> tokens = {
        "{", "}", "(", ")", "[", ",", ",", ":", ":", " ", "\n", "'", "\"", "'descr'", "'shape'",
        "'fortran_order'", "\"descr\"", "'<i8'", "'>i8'", "'|u1'", "'<f4'", "True", "False", "0", "1", "3",
        "6", "48", "L", "-", "18446744073709551615", "18446744073709551616", "\\", "\x93", std::string(1, '\0')};
    std::mt19937 rng(777);
    const std::string data(48, '\x01');
    for (int round = 0; round < 3000; ++round) {
      std::string header;
      const std::size_t count = rng() % 24;
      for (std::size_t i = 0; i < count; ++i) header += tokens[rng() % tokens.size()];
      INFO("round " << round << " header " << header);
      write_file(file, npy_bytes(1 + static_cast<int>(rng() % 3), header, data));
      read_or_npy_error(file);
    }
  }
}

TEST_CASE("array source: every row once per epoch with its label, whatever the workers", "[npy][arrays]") {
  const std::size_t rows = 37, row_bytes = 12;
  std::vector<std::byte> data(rows * row_bytes);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::byte(i * 7 + 3);
  std::vector<std::int64_t> labels(rows);
  for (std::size_t i = 0; i < rows; ++i) labels[i] = std::int64_t(i) * 10 - 5;
  const ArraySource source(data, row_bytes, labels);
  REQUIRE(source.size() == rows);
  const auto workers = GENERATE(1, 4);
  Config c;
  c.batch_size = 5;
  c.workers = std::size_t(workers);
  c.epochs = 2;
  c.seed = 9;
  c.sample_bytes = source.sample_bytes();
  Pipeline p(c, source.size(), {source.filler()});
  std::vector<int> seen(rows * 2);
  while (auto b = p.next()) {
    const Batch& batch = **b;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      const std::size_t i = batch.indices[k];
      ++seen[batch.epoch * rows + i];
      REQUIRE(batch.labels[k] == labels[i]);
      REQUIRE(std::memcmp(batch.sample(k).data(), data.data() + i * row_bytes, row_bytes) == 0);
    }
  }
  REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST_CASE("array source: a shape that does not add up is refused by name", "[npy][arrays]") {
  std::vector<std::byte> data(10);
  std::vector<std::int64_t> labels(5);
  REQUIRE_THROWS_WITH(ArraySource(data, 3, labels), Catch::Contains("not whole rows of 3"));
  REQUIRE_THROWS_WITH(ArraySource(data, 2, std::span<const std::int64_t>(labels).first(4)),
                      Catch::Contains("5 samples but 4 labels"));
  REQUIRE_THROWS_WITH(ArraySource(data, 0, labels), Catch::Contains("rows of 0 bytes"));
}

TEST_CASE("array source: a pipeline of another sample_bytes or dataset_size fails, never overruns",
          "[npy][arrays]") {
  // Unchecked, 8-byte slots took 16-byte rows (a heap overflow), 32-byte slots kept
  // stale bytes, and a dataset_size past the rows read beyond the array.
  const std::vector<std::byte> data(10 * 16);
  const std::vector<std::int64_t> labels(10);
  const ArraySource source(data, 16, labels);
  const auto run = [&](std::size_t sample_bytes, std::size_t size) -> std::string {
    Config c;
    c.batch_size = 4;
    c.epochs = 1;
    c.sample_bytes = sample_bytes;
    Pipeline p(c, size, {source.filler()});
    try {
      while (p.next()) {
      }
    } catch (const PipelineError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(run(8, 10), Catch::Contains("the pipeline's sample_bytes is 8 but a row is 16 bytes"));
  CHECK_THAT(run(32, 10), Catch::Contains("the pipeline's sample_bytes is 32 but a row is 16 bytes"));
  CHECK_THAT(run(16, 12), Catch::Contains("sample index 1") && Catch::Contains("past the 10 rows"));
}
