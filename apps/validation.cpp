#include "apps/validation.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include <torch/nn/functional.h>
#include <torch/utils.h>

#include "libtorch/tensors.h"
#include "pipeline/rng.h"

namespace conveyor::apps {

void split(const Dataset& all, double fraction, std::uint64_t seed, Dataset& train, Dataset& val) {
  std::vector<std::vector<std::size_t>> by_class(std::size_t(std::max<std::int64_t>(all.num_classes(), 0)));
  for (std::size_t i = 0; i < all.size(); ++i) by_class[std::size_t(all.label(i))].push_back(i);
  std::vector<std::size_t> train_ids, val_ids;
  for (std::size_t c = 0; c < by_class.size(); ++c) {
    auto& ids = by_class[c];
    Rng rng(seed, 0x5eed'5a11ULL, c);  // Fisher-Yates from the class's own stream
    for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.next_u64() % i]);
    std::size_t n_val = std::size_t(std::llround(fraction * double(ids.size())));
    if (fraction > 0 && n_val == 0 && ids.size() >= 2) n_val = 1;
    if (!ids.empty()) n_val = std::min(n_val, ids.size() - 1);  // every class keeps a training sample
    std::sort(ids.begin(), ids.begin() + std::ptrdiff_t(n_val));
    std::sort(ids.begin() + std::ptrdiff_t(n_val), ids.end());
    for (std::size_t k = 0; k < ids.size(); ++k) (k < n_val ? val_ids : train_ids).push_back(ids[k]);
  }
  train = all.subset(train_ids);  // keeps shard ranges and classes
  val = all.subset(val_ids);
}

ImageConfig Validation::center_config(const Options& o, int crop) {
  Options center = o;
  center.transforms.clear();
  center.views.clear();
  return image_config(center, Augmentation::center, crop);
}

Config Validation::config(const Options& o, const ImageSource& images, std::size_t passes) {
  Config cfg = pipeline_config(o);
  cfg.sample_bytes = images.sample_bytes();
  cfg.shuffle = false;
  cfg.epochs = passes;
  cfg.rank = 0;
  cfg.world_size = 1;
  return cfg;
}

ValResult validate(Net& model, Validation* val, const torch::Device& where) {
  ValResult r;
  if (!val) return r;
  torch::NoGradGuard no_grad;
  model.eval();
  double loss = 0;
  std::uint64_t correct = 0;
  for (auto& b : val->pipeline.epoch(val->passes++)) {
    r.skipped += b.host().skipped.size();
    if (b.size() == 0) continue;
    TensorBatch t = to_tensors(std::move(b));
    const torch::Tensor labels = t.labels.to(where);
    const torch::Tensor out = model.forward(t.images);
    loss += torch::nll_loss(out, labels, {}, at::Reduction::Sum).item<double>();
    correct += out.argmax(1).eq(labels).sum().item<std::int64_t>();
    r.images += std::size_t(labels.size(0));
  }
  model.train();
  if (r.images) {
    r.loss = loss / double(r.images);
    r.accuracy = double(correct) / double(r.images);
  }
  return r;
}

}  // namespace conveyor::apps
