#include "device/mix_step.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "device/kernels/mix.h"
#include "pipeline/config.h"
#include "pipeline/rng.h"

namespace conveyor {
namespace {

class MixStep final : public BatchStep {
 public:
  MixStep(const Mix& settings, const BatchStepSetup& setup)
      : device_(setup.device),
        mixing_(settings.mixing),
        seed_(setup.seed),
        layout_(*setup.normalize),
        draws_(setup.slots) {
    if (settings.soft_labels) {
      const std::size_t bytes = setup.batch_size * std::size_t(mixing_.num_classes) * sizeof(float);
      for (std::size_t i = 0; i < setup.slots; ++i) soft_.push_back(device_->allocate(bytes));
    }
  }

  void filled(const Batch&) noexcept override {}

  // The kernel reads each label as a class index: one outside the range fails
  // the batch here, before anything is enqueued.
  void prepare(Batch& b, std::size_t) override {
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::int64_t label = b.labels[j];
      if (label < 0 || label >= mixing_.num_classes) {
        throw std::runtime_error(std::string(mixing_.name()) + ": sample " + std::to_string(b.indices[j]) +
                                 " has label " + std::to_string(label) + ", outside num_classes=" +
                                 std::to_string(mixing_.num_classes));
      }
    }
  }
  void complete(std::size_t, std::byte*, Stream&) override {}

  // draws_[slot] is rewritten only here, for the slot's next batch: the
  // consumer read it (extras) before it released the slot.
  void complete_output(const Batch& b, std::size_t slot, void* out, const std::int64_t* labels,
                       Stream& stream) override {
    Rng rng(seed_ ^ kMixSeedSalt, b.epoch, b.index);
    const MixDraw d = draw_mix(mixing_, layout_.height, layout_.width, rng);
    draws_.at(slot) = d;
    MixJob job;
    job.data = out;
    job.samples = b.size();
    job.channels = layout_.channels;
    job.height = layout_.height;
    job.width = layout_.width;
    job.type = layout_.out_type;
    job.cut = d.cutmix;
    job.own = float(d.lambda);
    job.other = float(1.0 - d.lambda);
    job.x1 = d.x1;
    job.y1 = d.y1;
    job.x2 = d.x2;
    job.y2 = d.y2;
    if (!soft_.empty()) {
      job.labels = labels;
      job.soft = static_cast<float*>(soft_.at(slot)->data());
      job.classes = std::size_t(mixing_.num_classes);
    }
    kernels::mix(*device_, job, stream);
  }

  void extras(std::size_t slot, const Batch& b, BatchExtras& out) const override {
    const MixDraw& d = draws_.at(slot);
    if (!soft_.empty()) {
      out.tensors.push_back(BatchTensor{std::string(kSoftLabels), soft_.at(slot)->data(), DType::float32,
                                        {std::int64_t(b.size()), mixing_.num_classes}});
    }
    out.values.emplace_back(std::string(kMixLambda), d.lambda);
    out.values.emplace_back(std::string(kMixCutMix), d.cutmix ? 1.0 : 0.0);
  }

  void release(std::size_t) noexcept override {}
  void stop() noexcept override {}
  bool next_waits_for_release() const override { return false; }

 private:
  std::shared_ptr<Device> device_;
  BatchMixing mixing_;
  std::uint64_t seed_;
  TransferConfig::Normalization layout_;
  std::vector<MixDraw> draws_;                // per slot: its batch's draw
  std::vector<std::unique_ptr<Buffer>> soft_;  // per slot: the soft labels (none without)
};

}  // namespace

std::unique_ptr<BatchStep> Mix::operator()(const BatchStepSetup& setup) const {
  const char* name = mixing.name();
  if (!mixing.mixup && !mixing.cutmix) throw ConfigError("Mix", "needs MixUp or CutMix");
  if (!setup.normalize) {
    throw ConfigError(name, "needs normalize on the device (the command's --normalize, Python's normalize=, "
                            "TransferConfig::normalize): it mixes normalized batches");
  }
  if (!setup.normalize->views.empty()) throw ConfigError(name, "not with normalized views (one image tensor a batch)");
  mixing.validate();
  if (mixing.num_classes <= 0) throw ConfigError(name, "num_classes must be set (the dataset's number of classes)");
  return std::make_unique<MixStep>(*this, setup);
}

}  // namespace conveyor
