#include "image/default_dataset.h"

#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <stdexcept>
#include <system_error>

#include "pipeline/rng.h"
#include "data/file_system.h"

namespace conveyor {
namespace {

constexpr int kVersion = 1;  // bump when the rendering changes: the cache folder name follows

struct Rgb {
  float r, g, b;
};

// Is (x, y), in units of the shape's half size around its centre, inside class c's shape?
bool inside(int c, float x, float y, float period_phase) {
  const float ax = std::fabs(x), ay = std::fabs(y), d = std::sqrt(x * x + y * y);
  switch (c) {
    case 0: return d <= 1.0f;                                              // disk
    case 1: return ax <= 0.8f && ay <= 0.8f;                               // square
    case 2: return y <= 0.8f && y >= -0.9f && ax <= (y + 0.9f) * 0.55f;    // triangle, apex up
    case 3: return d <= 1.0f && d >= 0.6f;                                 // ring
    case 4: return (ax <= 0.25f && ay <= 1.0f) || (ay <= 0.25f && ax <= 1.0f);  // cross
    case 5: return std::fmod(y * 2.0f + period_phase + 100.0f, 1.0f) < 0.5f;    // horizontal stripes
    case 6: return std::fmod(x * 2.0f + period_phase + 100.0f, 1.0f) < 0.5f;    // vertical stripes
    case 7: return (int(std::floor(x * 2.0f + period_phase)) + int(std::floor(y * 2.0f + period_phase))) % 2 == 0;  // checker
    case 8: return std::fmod((x + y) * 1.5f + period_phase + 100.0f, 1.0f) < 0.5f;  // diagonal stripes
    default: {                                                             // dots
      const float fx = std::fmod(x * 2.0f + period_phase + 100.0f, 1.0f) - 0.5f;
      const float fy = std::fmod(y * 2.0f + period_phase + 100.0f, 1.0f) - 0.5f;
      return fx * fx + fy * fy <= 0.09f;
    }
  }
}

Rgb random_colour(Rng& rng) {
  return {float(rng.uniform(0, 255)), float(rng.uniform(0, 255)), float(rng.uniform(0, 255))};
}

// One image of class c: shape or texture in a foreground colour over a background colour, plus noise.
std::vector<unsigned char> render(int c, Rng& rng, int& w, int& h) {
  w = 64 + int(rng.below(65));
  h = 64 + int(rng.below(65));
  Rgb bg = random_colour(rng), fg = random_colour(rng);
  // Keep the two colours apart so the shape is visible.
  while (std::fabs(fg.r - bg.r) + std::fabs(fg.g - bg.g) + std::fabs(fg.b - bg.b) < 150) fg = random_colour(rng);
  const bool texture = c >= 5;  // stripes, checker, dots: a patterned patch
  const float size = float(std::min(w, h)) * float(texture ? rng.uniform(0.6, 1.0) : rng.uniform(0.25, 0.45));
  const float cx = float(w) * float(rng.uniform(0.35, 0.65)), cy = float(h) * float(rng.uniform(0.35, 0.65));
  const float phase = float(rng.uniform());
  const float noise = float(rng.uniform(5, 25));
  std::vector<unsigned char> px(std::size_t(w) * std::size_t(h) * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const float u = (float(x) - cx) / size, v = (float(y) - cy) / size;
      const bool in = texture ? (std::fabs(u) <= 1.0f && std::fabs(v) <= 1.0f && inside(c, u, v, phase)) : inside(c, u, v, phase);
      const Rgb col = in ? fg : bg;
      unsigned char* p = &px[(std::size_t(y) * std::size_t(w) + std::size_t(x)) * 3];
      const float vals[3] = {col.r, col.g, col.b};
      for (int k = 0; k < 3; ++k) {
        const float n = float(rng.uniform(-1, 1)) * noise;
        p[k] = static_cast<unsigned char>(std::clamp(vals[k] + n, 0.0f, 255.0f));
      }
    }
  }
  return px;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

const std::vector<std::string>& default_dataset_classes() {
  static const std::vector<std::string> names{"0-disk",  "1-square",  "2-triangle", "3-ring",   "4-cross",
                                              "5-hstripes", "6-vstripes", "7-checker", "8-diagonal", "9-dots"};
  return names;
}

namespace {

// Writes bytes to file, or throws naming it and the reason ("No space left on
// device"): a stream's failure alone said only "cannot write".
void write_whole(const std::filesystem::path& file, std::span<const unsigned char> bytes) {
  if (const int err = write_bytes(file, bytes); err != 0) {
    throw std::runtime_error(file.string() + ": cannot write: " + std::strerror(err));
  }
}

}  // namespace

void write_default_dataset(const std::filesystem::path& dir, const DefaultDatasetOptions& o) {
  namespace fs = std::filesystem;
  std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitCompress(), tjDestroy);
  if (!tj) throw std::runtime_error("default dataset: tjInitCompress failed");
  const auto& classes = default_dataset_classes();
  const std::size_t total = classes.size() * o.images_per_class;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const fs::path cdir = dir / classes[c];
    fs::create_directories(cdir);
    for (std::size_t i = 0; i < o.images_per_class; ++i) {
      if (o.cancelled && o.cancelled()) throw DatasetCancelled(c * o.images_per_class + i, total);
      Rng rng(o.seed, c, i);
      int w = 0, h = 0;
      const auto px = render(int(c), rng, w, h);
      unsigned char* jpeg = nullptr;
      unsigned long size = 0;
      char name[32];
      std::snprintf(name, sizeof name, "%05zu.jpg", i);
      const fs::path file = cdir / name;
      if (tjCompress2(tj.get(), px.data(), w, 0, h, TJPF_RGB, &jpeg, &size, TJSAMP_420, o.quality, 0) != 0) {
        const std::string msg = tjGetErrorStr2(tj.get());
        tjFree(jpeg);
        throw std::runtime_error(file.string() + ": JPEG encode failed: " + msg);
      }
      write_whole(file, {jpeg, size});
      tjFree(jpeg);
    }
  }
  const std::string marker = "conveyor default dataset v" + std::to_string(kVersion) + "\n";
  write_whole(dir / ".complete", {reinterpret_cast<const unsigned char*>(marker.data()), marker.size()});
}

std::filesystem::path default_dataset_dir(const DefaultDatasetOptions& o) {
  namespace fs = std::filesystem;
  fs::path base;
  if (!env("CONVEYOR_CACHE").empty()) {
    base = env("CONVEYOR_CACHE");
  } else if (const auto user = user_cache_dir()) {
    base = *user;
  } else {
    throw std::runtime_error("no cache folder for the default dataset: set CONVEYOR_CACHE, XDG_CACHE_HOME or HOME (" +
                             private_temp_dir().string() + " is not a private folder of this user)");
  }
  return base / ("default-v" + std::to_string(kVersion) + "-" + std::to_string(o.images_per_class) + "-" +
                 std::to_string(o.seed) + "-q" + std::to_string(o.quality));
}

std::filesystem::path ensure_default_dataset(const DefaultDatasetOptions& o, bool* made) {
  namespace fs = std::filesystem;
  const fs::path dir = default_dataset_dir(o);
  if (made) *made = false;
  if (fs::exists(dir / ".complete")) return dir;
  // Build beside it, then rename into place: never a partial set with a marker.
  const fs::path tmp = dir.string() + ".tmp-" + std::to_string(::getpid());
  try {
    fs::remove_all(tmp);
    write_default_dataset(tmp, o);
  } catch (const fs::filesystem_error& e) {
    // "cannot remove: Not a directory [...tmp-PID]" named neither the folder
    // nor where it came from (a CONVEYOR_CACHE that is a file, say).
    throw std::runtime_error("the default dataset's cache folder " + dir.parent_path().string() +
                             " (CONVEYOR_CACHE, else XDG_CACHE_HOME/conveyor, else HOME/.cache/conveyor): " +
                             e.code().message());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);  // an incomplete earlier attempt
  fs::rename(tmp, dir, ec);
  if (ec) {
    fs::remove_all(tmp);
    if (!fs::exists(dir / ".complete")) throw std::runtime_error(dir.string() + ": cannot create: " + ec.message());
    return dir;  // another process won the race
  }
  if (made) *made = true;
  return dir;
}

}  // namespace conveyor
