#include "pipeline/observer.h"

#include <algorithm>
#include <utility>

namespace conveyor {

const char* work_name(Work w) noexcept {
  switch (w) {
    case Work::fill: return "fill";
    case Work::transfer: return "transfer";
    case Work::finish: return "finish";
    case Work::next: return "next";
  }
  return "?";
}

namespace {

class ObserverList final : public Observer {
 public:
  explicit ObserverList(std::vector<std::shared_ptr<Observer>> list) : list_(std::move(list)) {}
  void on_entry(const WorkItem& item) noexcept override {
    for (const auto& o : list_) o->on_entry(item);
  }
  void on_exit(const WorkItem& item) noexcept override {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->on_exit(item);
  }
  void on_transferred(const Batch& batch, std::chrono::steady_clock::time_point begin,
                      std::chrono::steady_clock::time_point end) noexcept override {
    for (const auto& o : list_) o->on_transferred(batch, begin, end);
  }

 private:
  std::vector<std::shared_ptr<Observer>> list_;
};

}  // namespace

std::shared_ptr<Observer> combine_observers(std::vector<std::shared_ptr<Observer>> observers) {
  observers.erase(std::remove(observers.begin(), observers.end(), nullptr), observers.end());
  if (observers.empty()) return nullptr;
  if (observers.size() == 1) return std::move(observers.front());
  return std::make_shared<ObserverList>(std::move(observers));
}

}  // namespace conveyor
