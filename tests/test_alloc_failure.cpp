// Memory running out inside a pipeline thread, outside the filler (an epoch's
// order, a batch's indices), stops the pipeline with an error the consumer
// sees, instead of ending the process in std::terminate.
//
// This program replaces the global operator new, so it is a test program of
// its own: armed with a size, the next allocation of exactly that size made on
// a thread other than the test's throws std::bad_alloc, once.
#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "catch_compat.h"

#include "pipeline/pipeline.h"
#include "support.h"

namespace {
std::atomic<std::size_t> fail_size{0};  // 0: disarmed
const std::thread::id test_thread = std::this_thread::get_id();
}  // namespace

void* operator new(std::size_t n) {
  std::size_t armed = n;
  if (n != 0 && std::this_thread::get_id() != test_thread && fail_size.compare_exchange_strong(armed, 0)) {
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

// GCC says ASan is on with __SANITIZE_ADDRESS__, clang with __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define CONVEYOR_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CONVEYOR_TEST_ASAN 1
#endif
#endif

#if defined(CONVEYOR_TEST_ASAN)
// ASan's runtime makes a few allocations with its own operator new before this
// program's replacement is bound, and they come back through the delete above:
// an "operator new vs free" mismatch that is this test's doing, not the code's.
extern "C" const char* __asan_default_options() { return "alloc_dealloc_mismatch=0"; }
#endif

using namespace conveyor;

TEST_CASE("alloc failure: a worker that cannot allocate an epoch's order stops the pipeline with the error",
          "[pipeline][error]") {
  Config c;
  c.batch_size = 7;
  c.sample_bytes = 24;
  c.workers = 3;
  c.epochs = 2;
  const std::size_t n = 1237;  // the order of an epoch: 1237 x 8 bytes, a size nothing else here allocates
  fail_size = n * sizeof(std::uint64_t);
  Pipeline p(c, n, {test::fill_pattern});
  try {
    while (p.next()) {
    }
    FAIL("the pipeline ran to the end although a worker's allocation failed");
  } catch (const PipelineError& e) {
    REQUIRE(e.stage() == "worker");
    REQUIRE(e.epoch() == 0);
    REQUIRE(e.sample() == PipelineError::kNoSample);
    REQUIRE_THAT(e.message(), Catch::Contains("batch 0") && Catch::Contains("bad_alloc"));
  }
  REQUIRE(fail_size == 0);                          // the armed allocation did happen, on a pipeline thread
  REQUIRE_THROWS_AS(p.next(), PipelineError);       // the error sticks
}
