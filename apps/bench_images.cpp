// conveyor-bench-images: decode and augment speed on a folder of real images.
//
//   scales DIR    whole-image JPEG decode at each DCT scale M/8: which scales pay
//   decode DIR    one thread: full-size decode vs RandomResizedCrop(224)+flip, with a time split
//   resize DIR    stb_image_resize vs a hand-written resize on the same crops
//   pipeline DIR  the whole pipeline, batch 64, for a list of worker counts
//   ops DIR       each op's cost per 224 x 224 output, one thread, beside the
//                 decode + RandomResizedCrop(224) + flip it follows: the colour and
//                 affine ops, the policies, and the device's ops after normalize
//                 on the host backend's twins (normalize, RandomErasing, MixUp, CutMix)
//   full-decode LIST --threads N   full-size decode alone with N threads, the files
//                 read from disk each epoch: the reference row of apps/peers/compare.py
//   gpu-decode LIST --device cuda --threads 1,2,4   the device's JPEG decoder alone
//                 (nvJPEG), T threads of two decoders each: the GPU decode feed's limit
//
// Files are read once into memory for `scales`, `decode` and `resize`, so disk
// speed does not enter; `pipeline` reads them as the library does (page cache).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <stb/stb_image_resize.h>

#include "pipeline/pipeline.h"
#include "image/image_ops.h"
#include "image/image_source.h"
#include "image/photometric.h"
#include "image/random_erasing.h"
#include "device/device.h"
#include "device/device_pipeline.h"
#include "device/kernels/erase.h"
#include "device/kernels/mix.h"
#include "device/kernels/normalize.h"
#include "data/files/list_file.h"
#include "gpu_decode/jpeg_batch_decoder.h"
#include "image/gpu_decode_plan.h"
#include "pipeline/rng.h"

using namespace conveyor;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct File {
  std::filesystem::path path;
  std::vector<unsigned char> bytes;
};

std::vector<File> load(const std::filesystem::path& dir) {
  std::vector<File> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    File f{e.path(), {}};
    read_file(f.path, std::uint64_t{1} << 30, f.bytes);
    files.push_back(std::move(f));
  }
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.path < b.path; });
  if (files.empty()) throw std::runtime_error(dir.string() + ": no files");
  return files;
}

Dataset dataset_of(const std::vector<File>& files) {
  std::vector<std::filesystem::path> paths;
  for (const auto& f : files) paths.push_back(f.path);
  return Dataset(paths, std::vector<std::int64_t>(paths.size(), 0));
}

// Decodes every file whole at DCT scale m/8; returns seconds.
double decode_all(const std::vector<File>& files, int m, double* megapixels = nullptr) {
  ImageDecoder dec({}, {m});
  double mp = 0;
  const auto t0 = Clock::now();
  for (const auto& f : files) {
    const ImageInfo info = dec.open(f.bytes);
    const DecodedView v = dec.decode({0, 0, info.width, info.height}, m / 8.0);
    mp += double(info.width) * info.height * 1e-6;
    if (v.dct_scale != m && info.format == ImageFormat::jpeg) throw std::logic_error("scale not honoured");
  }
  if (megapixels) *megapixels = mp;
  return seconds_since(t0);
}

void cmd_scales(const std::vector<File>& files, int runs) {
  std::printf("whole-image decode of %zu files at each DCT scale M/8 (one thread, median of %d runs)\n", files.size(),
              runs);
  double full = 0;
  for (int m = 8; m >= 1; --m) {
    std::vector<double> t;
    double mp = 0;
    for (int r = 0; r < runs; ++r) t.push_back(decode_all(files, m, &mp));
    const double s = median(t);
    if (m == 8) full = s;
    std::printf("scale %d/8: %7.1f images/s  %6.1f source MP/s  time vs 8/8: %.2f\n", m, files.size() / s, mp / s,
                s / full);
  }
}

// Per-sample time split of the RandomResizedCrop path, mirroring ImageSource::render_sample.
struct Split {
  double header = 0, decode = 0, render = 0;
};

void cmd_decode(const std::vector<File>& files, int runs, const std::vector<int>& scales) {
  const Augment augment({RandomResizedCrop{{224, 224}}, RandomHorizontalFlip{}});
  std::vector<unsigned char> out(224 * 224 * 3);
  ResizeScratch scratch;
  std::printf("one thread, %zu files in memory, median of %d runs\n", files.size(), runs);
  std::vector<double> full_t, rrc_t, rrc_full_t;
  Split split;
  for (int r = 0; r < runs; ++r) {
    full_t.push_back(decode_all(files, 8));
    for (int variant = 0; variant < 2; ++variant) {  // 0: ROI + scaled decode; 1: full decode, same resize
      ImageDecoder dec({}, variant == 0 ? scales : std::vector<int>{8});
      Split s;
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < files.size(); ++i) {
        auto a = Clock::now();
        const ImageInfo info = dec.open(files[i].bytes);
        Rng rng(1, std::uint64_t(r), i);
        const Geometry g = augment.plan(info.width, info.height, rng);
        auto b = Clock::now();
        const DecodeRequest want = decode_request(g, info.width, info.height);
        const Rect region = variant == 0 ? want.region : Rect{0, 0, info.width, info.height};
        const DecodedView v = dec.decode(region, variant == 0 ? want.min_scale : 1.0);
        auto c = Clock::now();
        render(v, g, info.width, info.height, 0, out, scratch);
        auto d = Clock::now();
        s.header += std::chrono::duration<double>(b - a).count();
        s.decode += std::chrono::duration<double>(c - b).count();
        s.render += std::chrono::duration<double>(d - c).count();
      }
      (variant == 0 ? rrc_t : rrc_full_t).push_back(seconds_since(t0));
      if (variant == 0 && r == runs / 2) split = s;
    }
  }
  const double n = double(files.size());
  const double full = median(full_t), rrc = median(rrc_t), rrc_full = median(rrc_full_t);
  std::printf("full-size decode only:                        %7.1f images/s\n", n / full);
  std::printf("RandomResizedCrop(224)+flip, full decode:      %7.1f images/s\n", n / rrc_full);
  std::printf("RandomResizedCrop(224)+flip, ROI+scaled decode: %7.1f images/s  (%.2fx full-size decode, %.2fx full "
              "decode + same resize)\n",
              n / rrc, full / rrc, rrc_full / rrc);
  const double total = split.header + split.decode + split.render;
  std::printf("split of the ROI path (one run): header+plan %.0f%%, decode %.0f%%, resize+flip into slot %.0f%% "
              "(%.1f / %.1f / %.1f us per image)\n",
              100 * split.header / total, 100 * split.decode / total, 100 * split.render / total,
              1e6 * split.header / n, 1e6 * split.decode / n, 1e6 * split.render / n);
}

// stb_image_resize 0.97 (Debian 12) aborts on some downscale ratios with the
// triangle filter (nothings/stb#1449), so the library resizes with its own
// resize_triangle(); this compares the speed against stb with a filter that
// survives this data set (Mitchell by default, STBIR_FILTER_* numbering).
void cmd_resize(const std::vector<File>& files, int runs, int stb_filter) {
  const auto filter = stbir_filter(stb_filter);
  const Augment augment({RandomResizedCrop{{224, 224}}});
  // Decode each file's crop once; then time only the resizes.
  struct Job {
    std::vector<unsigned char> px;
    DecodedView v;
    double u0, v0, u1, v1;
  };
  std::vector<Job> jobs;
  ImageDecoder dec;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const ImageInfo info = dec.open(files[i].bytes);
    Rng rng(1, 0, i);
    const Geometry g = augment.plan(info.width, info.height, rng);
    const DecodedView v = dec.decode({0, 0, info.width, info.height}, 1.0);
    Job j;
    j.px.assign(v.pixels, v.pixels + v.stride * v.height);
    j.v = v;
    j.v.pixels = nullptr;
    j.u0 = g.x0;
    j.v0 = g.y0;
    j.u1 = g.x1;
    j.v1 = g.y1;
    jobs.push_back(std::move(j));
  }
  for (auto& j : jobs) j.v.pixels = j.px.data();
  std::vector<unsigned char> a(224 * 224 * 3), b(224 * 224 * 3);
  ResizeScratch scratch;
  std::vector<double> ts, th;
  double diff = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    for (const auto& j : jobs) {
      stbir_resize_region(j.v.pixels, j.v.width, j.v.height, int(j.v.stride), a.data(), 224, 224, 224 * 3,
                          STBIR_TYPE_UINT8, 3, STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP, STBIR_EDGE_CLAMP,
                          filter, filter, STBIR_COLORSPACE_LINEAR, nullptr,
                          float(j.u0 / j.v.width), float(j.v0 / j.v.height), float(j.u1 / j.v.width),
                          float(j.v1 / j.v.height));
    }
    ts.push_back(seconds_since(t0));
    t0 = Clock::now();
    for (const auto& j : jobs) {
      resize_triangle(j.v.pixels, j.v.width, j.v.height, j.v.stride, j.u0, j.v0, j.u1, j.v1, b.data(), 224, 224,
                      224 * 3, scratch);
    }
    th.push_back(seconds_since(t0));
  }
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(double(a[i]) - b[i]));
  const double n = double(jobs.size());
  std::printf("resize of %zu RandomResizedCrop boxes to 224x224 (full-size decoded sources, median of %d runs)\n",
              jobs.size(), runs);
  std::printf("stb_image_resize (filter %d):        %7.1f us/image\n", stb_filter, 1e6 * median(ts) / n);
  std::printf("resize_triangle (conveyor, by hand): %7.1f us/image  (stb time / ours = %.2f; max pixel difference on "
              "the last image %.0f)\n",
              1e6 * median(th) / n, median(ts) / median(th), diff);
}

void cmd_pipeline(const std::vector<File>& files, int runs, const std::vector<std::size_t>& workers, int epochs) {
  std::printf("pipeline: %zu files, RandomResizedCrop(224)+flip, batch 64, %d epochs per run, median of %d runs\n",
              files.size(), epochs, runs);
  for (std::size_t w : workers) {
    std::vector<double> rates;
    std::string table;
    for (int r = 0; r < runs; ++r) {
      ImageSource images(dataset_of(files), ImageConfig{}, w);
      Config c;
      c.batch_size = 64;
      c.sample_bytes = images.sample_bytes();
      c.workers = w;
      c.epochs = std::uint64_t(epochs);
      c.seed = std::uint64_t(r);
      Pipeline p(c, files.size(), {images.filler()});
      std::uint64_t samples = 0;
      const auto t0 = Clock::now();
      while (auto b = p.next()) samples += (*b)->size();
      rates.push_back(double(samples) / seconds_since(t0));
      table = p.stats().bottleneck_summary();
    }
    std::printf("workers %zu: %7.1f images/s   (%s)\n", w, median(rates), table.c_str());
  }
}

// Every file of the list read and decoded whole, full size, by `threads`
// threads (thread t takes samples t, t + threads, ...), each epoch timed; one
// line per epoch in the peers' format, "epoch E: N images in S s".
void cmd_full_decode(const std::string& list, std::size_t threads, int epochs) {
  const Dataset ds = dataset_from_list(list);
  for (int e = 0; e < epochs; ++e) {
    std::vector<std::size_t> decoded(threads, 0);
    std::vector<std::thread> pool;
    const auto t0 = Clock::now();
    for (std::size_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ImageDecoder dec;
        std::vector<unsigned char> bytes;
        for (std::size_t i = t; i < ds.size(); i += threads) {
          read_file(ds.path(i), DecodeLimits{}.max_file_bytes, bytes);
          const ImageInfo info = dec.open(bytes);
          (void)dec.decode({0, 0, info.width, info.height}, 1.0);
          ++decoded[t];
        }
      });
    }
    for (auto& t : pool) t.join();
    std::size_t n = 0;
    for (auto d : decoded) n += d;
    std::printf("epoch %d: %zu images in %.4f s\n", e, n, seconds_since(t0));
    std::fflush(stdout);
  }
}

// The device's JPEG decoder alone (create_jpeg_decoder: nvJPEG on CUDA, the
// host twin on the host backend), the limit the GPU decode feed's threads can
// reach whatever the pipeline around them: every file of the list read once
// into memory with a RandomResizedCrop(224) + flip box, then, for each count T
// of `thread_counts`, T threads, each with two decoders and streams as a feed
// thread has, decode() batches of `batch` files in turn (no render; a decoder
// waits for its previous batch to complete before it takes the next), for
// `seconds` after 1 s of warm-up. One line per T: images/s (the files the
// decoders took; refused ones do not count), and the decoders' DecodeTimes
// per batch (where the threads' time goes).
void cmd_gpu_decode(const std::string& list, BackendChoice backend, const std::vector<std::size_t>& thread_counts,
                    std::size_t batch, double seconds) {
  const Dataset ds = dataset_from_list(list);
  DeviceConfig dc;
  dc.backend = backend;
  const std::shared_ptr<Device> device = open_device(dc);
  const Augment augment({RandomResizedCrop{{224, 224}}, RandomHorizontalFlip{}});
  struct GpuFile {
    std::vector<unsigned char> bytes;
    int width = 0, height = 0;
    Geometry geometry;
  };
  std::vector<GpuFile> files;
  ImageDecoder header;
  for (std::size_t i = 0; i < ds.size(); ++i) {
    GpuFile f;
    read_file(ds.path(i), DecodeLimits{}.max_file_bytes, f.bytes);
    const ImageInfo info = header.open(f.bytes);
    Rng rng(0, 0, i);
    f.geometry = augment.plan(info.width, info.height, rng);
    if (!gpu_decodable(info, f.geometry)) continue;  // the feed never sees it
    f.width = info.width;
    f.height = info.height;
    files.push_back(std::move(f));
  }
  if (files.empty()) throw std::runtime_error(list + ": no file the GPU decode path takes");
  std::printf("gpu-decode: %zu of %zu files the GPU path takes, batch %zu, %s\n", files.size(), ds.size(), batch,
              device->describe().c_str());
  for (const std::size_t threads : thread_counts) {
    struct Lane {
      std::unique_ptr<JpegBatchDecoder> decoder;
      std::unique_ptr<Stream> stream;
    };
    std::vector<Lane> lanes(2 * threads);
    for (Lane& l : lanes) {
      std::string why;
      l.decoder = create_jpeg_decoder(*device, DecodeLimits{}, why);
      if (!l.decoder) throw std::runtime_error("no JPEG decoder: " + why);
      l.stream = device->create_stream();
    }
    std::atomic<int> phase{0};  // 0 warm-up, 1 measured, 2 stop
    std::vector<std::size_t> decoded(threads, 0);  // the files each thread's decoders took, measured
    std::vector<std::exception_ptr> errors(threads);
    std::vector<DecodeTimes> at_start(lanes.size());
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        try {
          std::vector<JpegItem> items;
          std::size_t next = t * batch;
          for (std::size_t k = 0; phase.load() < 2; ++k) {
            Lane& l = lanes[2 * t + k % 2];
            device->synchronize(*l.stream);  // its previous batch is done
            items.clear();
            for (std::size_t j = 0; j < batch; ++j, ++next) {
              const GpuFile& f = files[next % files.size()];
              items.push_back(JpegItem{f.bytes, f.width, f.height, f.geometry, nullptr});
            }
            const std::vector<std::string> refused = l.decoder->decode(items, *l.stream);
            if (phase.load() == 1) decoded[t] += taken_count(refused);
          }
          for (std::size_t k = 0; k < 2; ++k) device->synchronize(*lanes[2 * t + k].stream);
        } catch (...) {
          errors[t] = std::current_exception();
          phase = 2;  // the other threads stop too
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    for (std::size_t k = 0; k < lanes.size(); ++k) at_start[k] = lanes[k].decoder->times();
    const auto t0 = Clock::now();
    int warm = 0;
    phase.compare_exchange_strong(warm, 1);  // unless an error stopped them
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    phase = 2;
    for (auto& th : pool) th.join();
    for (const auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    const double took = seconds_since(t0);
    std::size_t n = 0;
    for (const std::size_t d : decoded) n += d;
    DecodeTimes sum;
    for (std::size_t k = 0; k < lanes.size(); ++k) sum += lanes[k].decoder->times().since(at_start[k]);
    const double per = sum.calls ? 1e-6 / double(sum.calls) : 0;  // ns summed -> ms per batch
    std::printf("gpu-decode: %zu threads x 2 decoders: %.0f images/s; per batch of %zu, ms: parse %.3f, setup %.3f "
                "(%llu setups), decode %.3f, taps %.3f\n",
                threads, double(n) / took, batch, double(sum.parse_ns) * per, double(sum.setup_ns) * per,
                (unsigned long long)sum.setups, double(sum.decode_ns) * per, double(sum.taps_ns) * per);
    std::fflush(stdout);
  }
}

// Each colour op on the photos' RandomResizedCrop(224) outputs: microseconds
// per image (the median of `runs` passes over every photo), one thread. The
// outputs are rendered once; each pass first copies them back, untimed, since
// the ops work in place.
// The ops that run on the device after normalize, on the host backend's
// twins (the cost where no GPU is; on a GPU they are kernels on the normalize
// stream): normalize to float16, RandomErasing (p 1: every sample erased),
// MixUp (float16 and float32) and CutMix (a box of a quarter of the area),
// per image of a batch of 256 (the photos' crops repeated).
void device_ops(const std::vector<unsigned char>& rendered, std::size_t images, int runs, double base) {
  DeviceConfig dc;
  dc.backend = BackendChoice::host;
  const std::shared_ptr<Device> device = open_device(dc);
  auto stream = device->create_stream();
  const std::size_t batch = 256, side = 224, sample = side * side * 3;
  auto raw = device->allocate(batch * sample);
  auto out = device->allocate(batch * sample * dtype_size(DType::float32));
  auto boxes = device->allocate(batch * sizeof(EraseBox));
  auto labels = device->allocate(batch * sizeof(std::int64_t));
  auto soft = device->allocate(batch * 1000 * sizeof(float));
  auto* u8 = static_cast<unsigned char*>(raw->data());
  for (std::size_t n = 0; n < batch; ++n) std::copy_n(rendered.data() + (n % images) * sample, sample, u8 + n * sample);
  auto* label = static_cast<std::int64_t*>(labels->data());
  for (std::size_t n = 0; n < batch; ++n) label[n] = std::int64_t(n * 7 % 1000);
  auto* box = static_cast<EraseBox*>(boxes->data());
  const RandomErasing erasing{1.0};
  for (std::size_t n = 0; n < batch; ++n) {
    Rng rng(3, 0, n);
    box[n] = draw_erase_box(erasing, side, side, rng).value_or(EraseBox{});
  }
  const TransferConfig::Normalization layout{side, side, 3, Normalize{}, DType::float16};
  const auto timed = [&](auto&& enqueue) {
    std::vector<double> t;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = Clock::now();
      enqueue();
      device->synchronize(*stream);
      t.push_back(seconds_since(t0));
    }
    return median(t) / double(batch) * 1e6;
  };
  const auto row = [&](const char* name, double us) {
    std::printf("%-34s %8.1f  (%.0f%% of the decode)\n", name, us, 100 * us / base);
  };
  row("normalize to float16 (host twin)", timed([&] {
        kernels::normalize(*device, layout.job(u8, out->data(), batch), *stream);
      }));
  EraseJob erase;
  erase.data = out->data();
  erase.boxes = box;
  erase.samples = batch;
  erase.channels = 3;
  erase.height = erase.width = side;
  erase.type = DType::float16;
  row("RandomErasing(p=1) (host twin)", timed([&] { kernels::erase(*device, erase, *stream); }));
  for (const auto& [cut, type] : {std::pair{false, DType::float16}, std::pair{false, DType::float32},
                                   std::pair{true, DType::float16}}) {
    MixJob mix;
    mix.data = out->data();
    mix.samples = batch;
    mix.channels = 3;
    mix.height = mix.width = side;
    mix.type = type;
    mix.cut = cut;
    mix.own = 0.7f;
    mix.other = 0.3f;
    mix.x1 = cut ? 56 : 0;  // CutMix: a box of half the sides, a quarter of the area
    mix.y1 = cut ? 56 : 0;
    mix.x2 = cut ? 168 : std::uint32_t(side);
    mix.y2 = cut ? 168 : std::uint32_t(side);
    mix.labels = label;
    mix.soft = static_cast<float*>(soft->data());
    mix.classes = 1000;
    const std::string name = std::string(cut ? "CutMix" : "MixUp") + " " + dtype_name(type) + ", 1000 classes (host)";
    row(name.c_str(), timed([&] { kernels::mix(*device, mix, *stream); }));
  }
}

void cmd_ops(const std::vector<File>& files, int runs) {
  const Augment augment({RandomResizedCrop{{224, 224}}, RandomHorizontalFlip{}});
  ImageDecoder decoder;
  ResizeScratch scratch;
  const std::size_t bytes = 224 * 224 * 3;
  std::vector<unsigned char> rendered(files.size() * bytes);
  std::vector<double> decode_runs;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < files.size(); ++i) {
      Rng rng(1, 0, i);
      const ImageInfo info = decoder.open(files[i].bytes);
      const Geometry g = augment.plan(info.width, info.height, rng);
      const DecodeRequest want = decode_request(g, info.width, info.height);
      render(decoder.decode(want.region, want.min_scale), g, info.width, info.height, 0,
             {rendered.data() + i * bytes, bytes}, scratch);
    }
    decode_runs.push_back(seconds_since(t0));
  }
  std::vector<unsigned char> work(rendered.size());
  PhotometricScratch ps;
  const auto each = [&](auto&& op) {
    std::vector<double> t;
    for (int r = 0; r < runs; ++r) {
      std::copy(rendered.begin(), rendered.end(), work.begin());  // untimed: the ops work in place
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < files.size(); ++i) op(RgbView{work.data() + i * bytes, 224, 224, 224 * 3});
      t.push_back(seconds_since(t0));
    }
    return median(t) / double(files.size()) * 1e6;
  };
  const double base = median(decode_runs) / double(files.size()) * 1e6;
  std::printf("%zu photos, 224 x 224 outputs, one thread, median of %d runs (us per image)\n", files.size(), runs);
  std::printf("%-34s %8.1f\n", "decode + RandomResizedCrop + flip", base);
  const struct {
    const char* name;
    std::function<void(RgbView)> op;
  } ops[] = {
      {"adjust_brightness(1.3)", [](RgbView v) { adjust_brightness(v, 1.3); }},
      {"adjust_contrast(1.3)", [](RgbView v) { adjust_contrast(v, 1.3); }},
      {"adjust_saturation(1.3)", [](RgbView v) { adjust_saturation(v, 1.3); }},
      {"adjust_hue(0.1)", [](RgbView v) { adjust_hue(v, 0.1); }},
      {"to_grayscale", [](RgbView v) { to_grayscale(v); }},
      {"solarize(128)", [](RgbView v) { solarize(v, 128); }},
      {"posterize(4)", [](RgbView v) { posterize(v, 4); }},
      {"autocontrast", [](RgbView v) { autocontrast(v); }},
      {"equalize", [](RgbView v) { equalize(v); }},
      {"invert", [](RgbView v) { invert(v); }},
      {"adjust_sharpness(2)", [&](RgbView v) { adjust_sharpness(v, 2, ps); }},
      {"gaussian_blur(23, sigma 1)", [&](RgbView v) { gaussian_blur(v, 23, 23, 1.0, 1.0, ps); }},
  };
  for (const auto& o : ops) {
    const double us = each(o.op);
    std::printf("%-34s %8.1f  (%.0f%% of the decode)\n", o.name, us, 100 * us / base);
  }
  // The affine ops of the policies, one at a time at a mid magnitude, then the
  // policies themselves: each image its own draw, as in a run.
  using K = PixelOp::Kind;
  const std::array<std::uint8_t, 3> fill{0, 0, 0};
  const struct {
    const char* name;
    PixelOp op;
  } affine_ops[] = {
      {"rotate(30)", {K::rotate, 30, 0, 0, fill}},
      {"shear_x(17 degrees)", {K::shear_x, 17, 0, 0, fill}},
      {"translate_x(50 px)", {K::translate_x, 50, 0, 0, fill}},
  };
  for (const auto& o : affine_ops) {
    const std::vector<PixelOp> one{o.op};
    const double us = each([&](RgbView v) { apply_pixel_ops(one, v, ps); });
    std::printf("%-34s %8.1f  (%.0f%% of the decode)\n", o.name, us, 100 * us / base);
  }
  const struct {
    const char* name;
    Augment augment;
  } policies[] = {
      {"TrivialAugmentWide", Augment({CenterCrop{{224, 224}}, TrivialAugmentWide{}})},
      {"RandAugment(2, 9)", Augment({CenterCrop{{224, 224}}, RandAugment{}})},
      {"ColorJitter(0.4, 0.4, 0.4, 0.1)",
       Augment({CenterCrop{{224, 224}}, ColorJitter{0.6, 1.4, 0.6, 1.4, 0.6, 1.4, -0.1, 0.1}})},
  };
  for (const auto& p : policies) {
    std::vector<PixelOp> drawn;
    std::size_t i = 0;
    const double us = each([&](RgbView v) {
      Rng rng(2, 0, i++);
      p.augment.plan_pixels(rng, drawn);
      apply_pixel_ops(drawn, v, ps);
    });
    std::printf("%-34s %8.1f  (%.0f%% of the decode)\n", p.name, us, 100 * us / base);
  }
  device_ops(rendered, files.size(), runs, base);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"conveyor-bench-images: decode and augment speed on a folder of real images"};
  int runs = 5;
  std::string dir;
  app.add_option("--runs", runs, "repetitions; the median is reported")->check(CLI::PositiveNumber);
  app.require_subcommand(1);
  auto* scales = app.add_subcommand("scales", "whole-image JPEG decode at each DCT scale M/8");
  auto* decode = app.add_subcommand("decode", "full-size decode vs RandomResizedCrop(224)+flip, one thread");
  auto* resize = app.add_subcommand("resize", "stb_image_resize vs a hand-written resize");
  auto* pipe = app.add_subcommand("pipeline", "the whole pipeline, batch 64");
  auto* ops = app.add_subcommand("ops", "each op's cost per 224 x 224 output, one thread");
  int stb_filter = STBIR_FILTER_MITCHELL;
  resize->add_option("--stb-filter", stb_filter, "stb_image_resize filter number (STBIR_FILTER_*)");
  std::vector<int> jpeg_scales = default_jpeg_scales();
  decode->add_option("--jpeg-scales", jpeg_scales, "allowed DCT scales M (of M/8)")->delimiter(',');
  std::vector<std::size_t> workers{1, 2};
  int epochs = 3;
  pipe->add_option("--workers", workers, "worker counts to run")->delimiter(',');
  pipe->add_option("--epochs", epochs, "epochs per run");
  for (auto* s : {scales, decode, resize, pipe, ops}) s->add_option("dir", dir, "folder of images")->required();
  auto* full = app.add_subcommand("full-decode", "full-size decode alone, N threads, files from a list (peers' reference)");
  std::string list;
  std::size_t threads = 1;
  full->add_option("list", list, "list file: `path label` per line")->required();
  full->add_option("--threads", threads, "decode threads")->check(CLI::Range(1, 1024));
  full->add_option("--epochs", epochs, "epochs (the first is a warm-up for compare.py)");
  auto* gpu = app.add_subcommand("gpu-decode", "the device's JPEG decoder alone (nvJPEG on cuda), T threads: its limit");
  std::string backend = "auto";
  std::vector<std::size_t> gpu_threads{1, 2, 4};
  std::size_t batch = 64;
  double seconds = 3;
  gpu->add_option("list", list, "list file: `path label` per line")->required();
  gpu->add_option("--device", backend, "auto | cuda | host")->check(CLI::IsMember({"auto", "cuda", "host"}));
  gpu->add_option("--threads", gpu_threads, "thread counts to run, two decoders each")->delimiter(',')
      ->check(CLI::Range(1, 64));
  gpu->add_option("--batch", batch, "files per decode() call")->check(CLI::Range(1, 4096));
  gpu->add_option("--seconds", seconds, "measured seconds per thread count, after 1 s of warm-up")
      ->check(CLI::Range(0.1, 600.0));
  CLI11_PARSE(app, argc, argv);
  try {
    if (*full) {
      cmd_full_decode(list, threads, epochs);
      return 0;
    }
    if (*gpu) {
      cmd_gpu_decode(list, *parse_backend(backend), gpu_threads, batch, seconds);
      return 0;
    }
    const auto files = load(dir);
    if (*scales) cmd_scales(files, runs);
    if (*decode) cmd_decode(files, runs, jpeg_scales);
    if (*resize) cmd_resize(files, runs, stb_filter);
    if (*pipe) cmd_pipeline(files, runs, workers, epochs);
    if (*ops) cmd_ops(files, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conveyor-bench-images: %s\n", e.what());
    return 1;
  }
  return 0;
}
