// TempDir: a fresh folder for one test, removed with everything in it on destruction.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace conveyor::test {

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    for (int attempt = 0; attempt < 100; ++attempt) {
      root_ = fs::temp_directory_path() / ("conveyor_test_" + std::to_string(rd()) + "_" + std::to_string(rd()));
      if (fs::create_directory(root_)) return;
    }
    throw std::runtime_error("cannot create a unique temp dir");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& root() const { return root_; }
  const fs::path& path() const { return root_; }
  fs::path operator/(const std::string& name) const { return root_ / name; }
  // Writes `content` byte for byte to root()/rel, creating parent folders; returns the full path.
  fs::path write(const std::string& rel, const std::string& content = "not an image") const {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  // The same for binary content (an encoded image).
  fs::path write(const std::string& rel, const std::vector<unsigned char>& bytes) const {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return p;
  }
  fs::path mkdir(const std::string& rel) const {
    const fs::path p = root_ / rel;
    fs::create_directories(p);
    return p;
  }

 private:
  fs::path root_;
};

}  // namespace conveyor::test
