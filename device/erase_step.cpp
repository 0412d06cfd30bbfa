#include "device/erase_step.h"

#include <vector>

#include "device/kernels/erase.h"
#include "pipeline/config.h"
#include "pipeline/rng.h"

namespace conveyor {
namespace {

class EraseStep final : public BatchStep {
 public:
  EraseStep(const Erase& settings, const BatchStepSetup& setup)
      : device_(setup.device), erasing_(settings.erasing), seed_(setup.seed), layout_(*setup.normalize) {
    const std::size_t bytes = setup.batch_size * sizeof(EraseBox);
    for (std::size_t i = 0; i < setup.slots; ++i) {
      host_.push_back(Pinned(static_cast<EraseBox*>(device_->allocate_host(bytes)), PinnedFree{device_.get()}));
      device_boxes_.push_back(device_->allocate(bytes));
    }
  }

  void filled(const Batch&) noexcept override {}
  void prepare(Batch&, std::size_t) override {}
  void complete(std::size_t, std::byte*, Stream&) override {}

  // The slot's pinned rectangles are rewritten only here, for its next batch:
  // by then the host saw the slot's last copied, recorded after this copy.
  void complete_output(const Batch& b, std::size_t slot, void* out, const std::int64_t*, Stream& stream) override {
    EraseBox* boxes = host_.at(slot).get();
    for (std::size_t j = 0; j < b.size(); ++j) {
      Rng rng(seed_ ^ kEraseSeedSalt, b.epoch, b.indices[j]);
      boxes[j] = draw_erase_box(erasing_, layout_.height, layout_.width, rng).value_or(EraseBox{});
    }
    void* on_device = device_boxes_.at(slot)->data();
    device_->copy_to_device(on_device, boxes, b.size() * sizeof(EraseBox), stream);
    EraseJob job;
    job.data = out;
    job.boxes = static_cast<const EraseBox*>(on_device);
    job.samples = b.size();
    job.channels = layout_.channels;
    job.height = layout_.height;
    job.width = layout_.width;
    job.type = layout_.out_type;
    for (std::size_t c = 0; c < 3; ++c) job.value[c] = erasing_.value[c];
    kernels::erase(*device_, job, stream);
  }

  void release(std::size_t) noexcept override {}
  void stop() noexcept override {}
  bool next_waits_for_release() const override { return false; }

 private:
  struct PinnedFree {
    Device* device;
    void operator()(EraseBox* p) const noexcept { device->free_host(p); }
  };
  using Pinned = std::unique_ptr<EraseBox, PinnedFree>;

  std::shared_ptr<Device> device_;
  RandomErasing erasing_;
  std::uint64_t seed_;
  TransferConfig::Normalization layout_;
  std::vector<Pinned> host_;                         // per slot: the rectangles drawn, pinned
  std::vector<std::unique_ptr<Buffer>> device_boxes_;  // per slot: their copy on the device
};

}  // namespace

std::unique_ptr<BatchStep> Erase::operator()(const BatchStepSetup& setup) const {
  if (!setup.normalize) {
    throw ConfigError("RandomErasing", "needs normalize on the device (the command's --normalize, Python's normalize=, "
                                       "TransferConfig::normalize): it follows Normalize");
  }
  if (!setup.normalize->views.empty()) throw ConfigError("RandomErasing", "not with normalized views (one image tensor a batch)");
  erasing.validate();
  return std::make_unique<EraseStep>(*this, setup);
}

}  // namespace conveyor
