#include "image/gpu_decode_plan.h"

#include <stdexcept>
#include <string>

#include "pipeline/rng.h"
#include "image/resize_math.h"

namespace conveyor {

bool gpu_decodes(std::uint64_t index, double share) {
  if (!(share >= 0 && share <= 1)) throw std::invalid_argument("gpu decode share " + std::to_string(share) + " is not in [0, 1]");
  if (share >= 1) return true;
  // A salt so the split is not correlated with Rng(seed, epoch, index)'s own first draws.
  std::uint64_t k = index ^ 0x6770752d6465636fULL;  // "gpu-deco"
  const std::uint64_t h = splitmix64(k);
  return double(h >> 11) * 0x1.0p-53 < share;  // h's top 53 bits as a uniform [0, 1)
}

bool gpu_decodable(const ImageInfo& info, const Geometry& g) {
  // The GPU render has no vertical flip: such a box stays on the CPU.
  if (g.vflip) return false;
  if (info.format != ImageFormat::jpeg || info.progressive || info.arithmetic || !info.gray_or_ycc) return false;
  // The box inside the image and inside its window: no padding to write. Padding
  // is whole pixels, while a box and its window are computed apart (left + w
  // against left + (w / 224) * 224), so an edge may pass the other by a rounding
  // error of ~1e-13 px; the resize's taps never read past the image or the
  // window, so such a box is inside. Compared exactly, RandomResizedCrop sent
  // about 2% of its boxes to the CPU.
  constexpr double kSlack = 1e-6;  // px; far above double rounding, far below a pixel of padding
  const double w = info.width, h = info.height;
  return g.x1 > g.x0 && g.y1 > g.y0 && g.x0 >= -kSlack && g.y0 >= -kSlack && g.x1 <= w + kSlack && g.y1 <= h + kSlack &&
         g.x0 >= g.window.u0 - kSlack && g.y0 >= g.window.v0 - kSlack && g.x1 <= g.window.u1 + kSlack &&
         g.y1 <= g.window.v1 + kSlack;
}

void render_gpu_twin(const unsigned char* full, int width, int height, std::ptrdiff_t stride, const Geometry& g,
                     std::span<unsigned char> dst) {
  const int ow = g.out.width, oh = g.out.height;
  if (dst.size() != std::size_t(ow) * std::size_t(oh) * 3) {
    throw std::invalid_argument("render_gpu_twin: dst holds " + std::to_string(dst.size()) + " bytes, the output needs " +
                                std::to_string(std::size_t(ow) * std::size_t(oh) * 3));
  }
  if (g.vflip) throw std::invalid_argument("render_gpu_twin: a vertically flipped box is the CPU path's (gpu_decodable)");
  resize_reference(full, width, height, stride, g.x0, g.y0, g.x1, g.y1, dst.data(), ow, oh, std::ptrdiff_t(ow) * 3, g.flip,
                   g.window);
}

DeferredDecode DeferredDecodes::blank() {
  std::lock_guard lk(mu_);
  if (spare_.empty()) return {};
  DeferredDecode d = std::move(spare_.back());
  spare_.pop_back();
  return d;
}

void DeferredDecodes::put(std::uint64_t epoch, std::uint64_t index, DeferredDecode d) {
  std::lock_guard lk(mu_);
  pending_.emplace(std::pair{epoch, index}, std::move(d));
}

std::optional<DeferredDecode> DeferredDecodes::take(std::uint64_t epoch, std::uint64_t index) {
  std::lock_guard lk(mu_);
  const auto it = pending_.find({epoch, index});
  if (it == pending_.end()) return std::nullopt;
  DeferredDecode d = std::move(it->second);
  pending_.erase(it);
  return d;
}

void DeferredDecodes::recycle(DeferredDecode d) {
  std::lock_guard lk(mu_);
  constexpr std::size_t kMaxSpare = 1024;  // more than a few batches in flight ever defer
  if (spare_.size() < kMaxSpare) spare_.push_back(std::move(d));
}

std::size_t DeferredDecodes::pending() const {
  std::lock_guard lk(mu_);
  return pending_.size();
}

void DeferredDecodes::attach() {
  std::lock_guard lk(mu_);
  pending_.clear();
  ++attached_;
}

void DeferredDecodes::detach() {
  std::lock_guard lk(mu_);
  if (attached_) --attached_;
  if (!attached_) pending_.clear();
}

bool DeferredDecodes::attached() const {
  std::lock_guard lk(mu_);
  return attached_ > 0;
}

}  // namespace conveyor
