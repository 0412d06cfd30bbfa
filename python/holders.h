// Holders: which threads hold a Loader's batches, so that next(), finding
// every device slot held, can tell a wait that ends (another thread will drop
// its batch) from one that never would: this thread holds them all, or every
// other holder is itself waiting in next(), or has ended.
//
//   took(t)       thread t, inside next(), has taken a batch
//   released(t)   a batch that t took has died (on whatever thread)
//   enter(t) .. leave(t)   t is inside next() (took() also ends it)
//   may_come_back(me, n)   whether a batch held by another thread may come
//                 back: one running outside next(), or one an ended thread
//                 handed on (the caller asks whether any thread is left to
//                 drop it)
//
// A thread is known by thread_serial(), a number never reused in the process
// (std::thread::id values are, once a thread ends). A batch counts against the
// thread that took it until it dies: one handed to another thread to drop is
// still its taker's, and once its taker has ended it counts as `ended`.
//
// Thread safety: every member may be called from any thread; none touches
// Python. Shared (shared_ptr) by a loader and its batches, which may outlive
// it. A thread that took from a Holders tells it when it ends (a thread_local
// destructor), through a weak_ptr.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <unistd.h>

namespace conveyor::python {

// This thread's number: 1, 2, 3, ... in the order threads first ask, never reused.
inline std::uint64_t thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t serial = next.fetch_add(1, std::memory_order_relaxed);
  return serial;
}

class Holders : public std::enable_shared_from_this<Holders> {
 public:
  // Who holds the batches, as may_come_back() found them.
  struct Count {
    std::size_t mine = 0;                             // taken by the asking thread
    std::size_t waiting = 0, waiting_threads = 0;     // by other threads now inside next()
    std::size_t ended = 0;                            // by threads that have ended
    std::size_t running = 0, running_threads = 0;     // by other threads outside next()
    std::uint64_t releases = 0;                       // batches given back so far, ever
  };

  void took(std::uint64_t t) {
    {
      std::lock_guard lk(mu_);
      ++held_[t];
      drop(in_next_, t);
    }
    tell_at_exit();
  }
  void released(std::uint64_t t) {
    {
      std::lock_guard lk(mu_);
      if (drop(held_, t)) ended_.erase(t);
      ++releases_;
    }
    changed_.notify_all();
  }
  void enter(std::uint64_t t) {
    std::lock_guard lk(mu_);
    ++in_next_[t];
  }
  void leave(std::uint64_t t) {
    {
      std::lock_guard lk(mu_);
      drop(in_next_, t);
    }
    changed_.notify_all();  // a waiter may now be the last one outside
  }
  void ended(std::uint64_t t) {
    {
      std::lock_guard lk(mu_);
      if (held_.contains(t)) ended_.insert(t);
      in_next_.erase(t);
    }
    changed_.notify_all();
  }

  bool may_come_back(std::uint64_t me, Count& n) {
    std::lock_guard lk(mu_);
    n = Count{};
    n.releases = releases_;
    for (const auto& [t, k] : held_) {
      if (t == me) {
        n.mine = k;
      } else if (ended_.contains(t)) {
        n.ended += k;
      } else if (in_next_.contains(t)) {
        n.waiting += k;
        ++n.waiting_threads;
      } else {
        n.running += k;
        ++n.running_threads;
      }
    }
    return n.running > 0 || n.ended > 0;
  }

  // Waits up to `timeout` for a release, a thread leaving next(), or one ending.
  void wait(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    changed_.wait_for(lk, timeout);
  }

 private:
  // Takes one from m[t], erasing it at 0; true when it reached 0.
  static bool drop(std::map<std::uint64_t, std::size_t>& m, std::uint64_t t) {
    const auto it = m.find(t);
    if (it == m.end() || --it->second != 0) return false;
    m.erase(it);
    return true;
  }

  // The Holders this thread took from, told when it ends. Not in a forked
  // child: a mutex there may have been copied locked by another thread.
  struct AtExit {
    std::uint64_t serial = thread_serial();
    pid_t pid = ::getpid();
    std::vector<std::weak_ptr<Holders>> told;
    ~AtExit() {
      if (::getpid() != pid) return;
      for (auto& w : told) {
        if (const auto h = w.lock()) h->ended(serial);
      }
    }
  };
  void tell_at_exit() {
    thread_local AtExit at_exit;
    std::erase_if(at_exit.told, [](const auto& w) { return w.expired(); });
    for (const auto& w : at_exit.told) {
      if (w.lock().get() == this) return;
    }
    at_exit.told.push_back(weak_from_this());
  }

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::uint64_t, std::size_t> held_, in_next_;  // batches held / next() calls, by thread
  std::set<std::uint64_t> ended_;                          // threads in held_ that have ended
  std::uint64_t releases_ = 0;
};

}  // namespace conveyor::python
