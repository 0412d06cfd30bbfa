// Writes the seed corpora of the fuzz targets into OUT/{decode,list,npy,config,tar}:
// small generated images of every supported format and kind (tests/image_writers.h),
// list files, .npy files and TOML configs. Generated, not stored, as the tests do.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "image_writers.h"
#include "data/npy.h"
#include "image/jpeg_restart.h"

namespace t = conveyor::test;
namespace fs = std::filesystem;

namespace {
void text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
}  // namespace

// Tar archives as GNU tar writes them in its gnu (long names: 'L' headers),
// ustar (prefix field) and pax ('x' records) formats, over a small tree with a
// long path; just an empty archive where no tar is installed.
int tar_seeds(const fs::path& dir) {
  const fs::path tree = dir / "tree";
  const fs::path deep = tree / "k" / std::string(90, 'd') / std::string(40, 'e');
  fs::create_directories(deep);
  t::write_file(tree / "k" / "0001.jpg", std::vector<unsigned char>(700, 'j'));
  t::write_file(tree / "k" / "0001.cls", std::vector<unsigned char>{'7'});
  t::write_file(deep / "0002.jpg", std::vector<unsigned char>(3, 0));
  int n = 0;
  for (const char* format : {"gnu", "ustar", "pax"}) {
    const std::string cmd = "cd '" + tree.string() + "' && tar --format=" + format + " -cf '" +
                            (dir / std::to_string(n)).string() + "' k 2>/dev/null";
    if (std::system(cmd.c_str()) == 0) ++n;
  }
  t::write_file(dir / std::to_string(n++), std::vector<unsigned char>(1024, 0));
  fs::remove_all(tree);
  return n;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds OUT CONFIGS_DIR\n");
    return 2;
  }
  const fs::path out = argv[1], configs = argv[2];
  for (const char* d : {"decode", "list", "npy", "config", "tar"}) fs::create_directories(out / d);

  const t::Rgb img = t::photo_like(37, 29, 1);
  int n = 0;
  const auto seed = [&](const std::vector<unsigned char>& bytes) { t::write_file(out / "decode" / std::to_string(n++), bytes); };
  for (auto kind : {t::JpegKind::baseline, t::JpegKind::progressive, t::JpegKind::arithmetic, t::JpegKind::gray,
                    t::JpegKind::cmyk_adobe, t::JpegKind::twelve_bit_header}) {
    seed(t::jpeg(img, {kind, 90, true}));
  }
  seed(t::jpeg(img, {t::JpegKind::baseline, 50, false}));
  // Restart markers as `conveyor pack` writes them: crops decode a subset of the
  // intervals, columns as well as rows (image/jpeg_restart.h), grey and colour.
  for (auto kind : {t::JpegKind::baseline, t::JpegKind::gray}) {
    seed(*conveyor::add_restart_markers(t::jpeg(t::photo_like(128, 72, 2), {kind, 90, true})));  // rows of 2 and 4 intervals
  }
  for (auto kind : {t::PngKind::rgb8, t::PngKind::rgba8, t::PngKind::gray8, t::PngKind::gray_alpha8,
                    t::PngKind::palette8, t::PngKind::rgb16, t::PngKind::gray16}) {
    seed(t::png(img, kind));
  }
  seed(t::bmp(img));
  seed(t::tga(img));
  seed(t::tga_raw(img));
  seed(t::ppm(img));
  seed(t::pgm(img));
  for (const int maxval : {15, 1000, 65535}) {  // PNM with fewer or more than 8 bits per sample
    seed(t::pnm_maxval(img, maxval, false));
    seed(t::pnm_maxval(img, maxval, true));
  }
  seed(t::gif(img));
  seed(t::gif(img, 2));
  seed(t::jpeg_claiming(60000, 60000));
  seed(t::png_header_only(70000, 70000));
  seed(t::truncated(t::jpeg(img), 100));

  text(out / "list" / "0", "a.jpg 0\nb c.jpg 1\n# comment\n\n'quote'.png 2\r\n");
  text(out / "list" / "1", "\xEF\xBB\xBFx/y.jpg 9223372036854775806\n");
  text(out / "list" / "2", "only-a-path\n");

  const std::size_t shape2[] = {3, 4}, shape1[] = {5};
  const std::vector<std::byte> bytes(3 * 4 * 4, std::byte{1});
  conveyor::write_npy(out / "npy" / "0", conveyor::NpyType::float32, shape2, bytes);
  conveyor::write_npy(out / "npy" / "1", conveyor::NpyType::uint8, shape1, std::span(bytes).first(5));
  const std::vector<std::byte> labels(5 * 8, std::byte{0});
  conveyor::write_npy(out / "npy" / "2", conveyor::NpyType::int64, shape1, labels);

  int c = 0;
  for (const auto& e : fs::directory_iterator(configs)) {
    if (e.path().extension() == ".toml") fs::copy_file(e.path(), out / "config" / std::to_string(c++), fs::copy_options::overwrite_existing);
  }
  text(out / "config" / std::to_string(c++), "workers = 2\nbatch = 8\nnormalize = \"float32\"\nnormalize-in = \"workers\"\n");
  const int tars = tar_seeds(out / "tar");
  std::printf("seeds: %d images, 3 lists, 3 .npy files, %d configs, %d tars in %s\n", n, c, tars, out.c_str());
  return 0;
}
