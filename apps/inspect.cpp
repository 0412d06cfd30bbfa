// `conveyor inspect`: decode every sample once, with the workers of a
// pipeline, and count what the dataset holds: formats, colour modes, sizes,
// and every file that cannot be read, with why.
#include "apps/inspect.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "pipeline/pipeline.h"
#include "image/decode.h"
#include "data/file_system.h"
#include "data/quote_bytes.h"
#include "data/reader.h"

namespace conveyor::apps {

int inspect(const Options& o) {
  // A signal during the folder scan ends the program at once (nothing counted
  // yet, nothing to print); from the first sample on, Ctrl-C prints the counts
  // so far, then exits 130.
  Dataset dataset = open_dataset(o, Announce::always, Remote::download_first);
  catch_interrupts();
  struct Counts {
    std::map<std::string, std::size_t> formats, modes, sizes;
    std::vector<std::pair<std::string, std::string>> failed;
  };
  std::vector<Counts> per_worker(o.workers);
  std::vector<std::unique_ptr<ImageDecoder>> decoders;
  for (std::size_t w = 0; w < o.workers; ++w) decoders.push_back(std::make_unique<ImageDecoder>());
  std::vector<std::vector<unsigned char>> files(o.workers);
  Config cfg;
  cfg.batch_size = o.batch;
  cfg.workers = o.workers;
  cfg.shuffle = false;
  cfg.epochs = 1;
  const SampleReader reader(dataset, nullptr, DecodeLimits{}.max_file_bytes);  // the dataset's files
  StageFunctions stages;
  stages.fill = [&](Sample& s) {
    Counts& c = per_worker[s.worker];
    const std::string path = dataset.name(s.index);
    try {
      reader.read(s.index, files[s.worker]);
      ImageDecoder& d = *decoders[s.worker];
      const ImageInfo info = d.open(files[s.worker]);
      (void)d.decode(Rect{0, 0, info.width, info.height}, 1.0);
      ++c.formats[format_name(info.format)];
      static const char* mode[] = {"?", "gray", "gray+alpha", "rgb", "rgba/cmyk"};
      ++c.modes[mode[std::clamp(info.components, 0, 4)]];
      const int side = std::max(info.width, info.height);
      ++c.sizes[side <= 128 ? "<=128 px" : side <= 512 ? "129-512 px" : side <= 2048 ? "513-2048 px" : ">2048 px"];
    } catch (const std::exception& e) {
      c.failed.emplace_back(path, e.what());
    }
  };
  Pipeline p(cfg, dataset.size(), std::move(stages));
  // Waits in slices, so that a signal is seen while a read stalls.
  const auto signalled = [] { return interrupt_signal() != 0; };
  while (wait_for_batch(p, signalled) && !signalled()) {
    if (!p.next()) break;
  }
  p.stop();  // every worker joined: its counts are final
  Counts all;
  for (auto& c : per_worker) {
    for (auto& [k, v] : c.formats) all.formats[k] += v;
    for (auto& [k, v] : c.modes) all.modes[k] += v;
    for (auto& [k, v] : c.sizes) all.sizes[k] += v;
    all.failed.insert(all.failed.end(), c.failed.begin(), c.failed.end());
  }
  std::size_t decoded = 0;
  for (auto& [k, v] : all.formats) decoded += v;
  std::printf("%zu samples decoded, %zu unreadable\n", decoded, all.failed.size());
  auto show = [](const char* title, const std::map<std::string, std::size_t>& m) {
    std::printf("%s:", title);
    for (auto& [k, v] : m) std::printf(" %s %zu;", k.c_str(), v);
    std::printf("\n");
  };
  show("formats", all.formats);
  show("colour", all.modes);
  show("largest side", all.sizes);
  std::sort(all.failed.begin(), all.failed.end());
  for (auto& [path, why] : all.failed) std::printf("unreadable: %s: %s\n", printable(path).c_str(), printable(why).c_str());
  if (const int sig = interrupt_signal(); sig != 0) {
    std::printf("interrupted by %s after %zu of %zu samples\n", signal_word(sig), decoded + all.failed.size(),
                dataset.size());
    return 128 + sig;
  }
  return all.failed.empty() ? 0 : 1;
}

}  // namespace conveyor::apps
