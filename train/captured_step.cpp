// CapturedStep: warm-up, capture into a private pool with the dropout offset on the device, and
// replay (Note [Captured training steps] in captured_step.h).
#include "train/captured_step.h"

#include <atomic>

#include "base/error.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/elementwise.h"
#include "kernels/graph.h"
#include "memory/caching_allocator.h"
#include "train/step_planner.h"

namespace frugal::train {
namespace {

// Private pool tags: far above any real stream tag, one per capture in the process.
memory::StreamId next_pool_id() {
  static std::atomic<memory::StreamId> next{memory::StreamId{1} << 62};
  return next.fetch_add(1);
}

memory::CachingAllocator& caching_allocator_of(Device device) {
  auto* alloc = dynamic_cast<memory::CachingAllocator*>(&memory::allocator_for(device));
  FRUGAL_CHECK(alloc != nullptr, "CapturedStep: ", device, " has no caching allocator");
  return *alloc;
}

}  // namespace

CapturedStep::CapturedStep(Device device, StepFn step, CapturedStepOptions options)
    : device_(device),
      step_(std::move(step)),
      options_(options),
      gen_(options.generator != nullptr ? options.generator : &default_generator()),
      can_capture_(kernels::graph_capture_supported(device)) {
  FRUGAL_CHECK(step_ != nullptr, "CapturedStep: no step function");
  FRUGAL_CHECK(options_.warmup >= 1, "CapturedStep: warmup must be at least 1 (optimizer state ",
               "and algorithm choices must exist before capture), got ", options_.warmup);
}

CapturedStep::~CapturedStep() {
  if (graph_ == nullptr) return;
  graph_.reset();  // waits for the replays in flight
  memory::CachingAllocator& alloc = caching_allocator_of(device_);
  alloc.release_private_pool(pool_);
  alloc.unpin_arena(pinned_arena_);
}

Tensor CapturedStep::run_eager() {
  if (options_.planner == nullptr) return step_();
  Tensor out;
  options_.planner->run([&] { out = step_(); });
  return out;
}

int64_t CapturedStep::graph_nodes() const { return graph_ != nullptr ? graph_->num_nodes() : 0; }

bool CapturedStep::next_call_is_eager() const {
  // A planner still settling (plans queued, a step departing) would re-plan inside the capture.
  const bool settling = options_.planner != nullptr && options_.planner->settling() &&
                        calls_ < options_.warmup + kMaxSettlingCalls;
  return !can_capture_ || calls_ < options_.warmup || (graph_ == nullptr && settling);
}

Tensor CapturedStep::operator()() {
  if (next_call_is_eager()) {
    ++calls_;
    return run_eager();
  }
  ++calls_;
  if (graph_ == nullptr) {
    capture();
  } else {
    replay();
  }
  return out_;
}

void CapturedStep::capture() {
  memory::CachingAllocator& alloc = caching_allocator_of(device_);
  // The offset base lives outside the pool: it outlives any one replay's temporaries.
  rng_counter_ = zeros({1}, {.dtype = DType::i64, .device = device_});
  fill_(rng_counter_, static_cast<double>(gen_->offset()));  // exact below 2^53 draws
  auto graph = std::make_unique<kernels::DeviceGraph>(device_);
  const memory::StreamId pool = next_pool_id();
  gen_->begin_graph_capture(reinterpret_cast<const uint64_t*>(rng_counter_.data<int64_t>()));
  // Planned: the arena the capture writes in stays for the graph (Note [Captured steps in the
  // arena]); a planner that re-plans during the capture gets another one.
  const bool planned = options_.planner != nullptr && options_.planner->active();
  const uint64_t offset_before = gen_->offset();  // draws while capturing ran nothing
  const uintptr_t pinned = planned ? alloc.pin_arena() : 0;
  alloc.open_private_pool(pool);
  Tensor out;
  try {
    graph->begin_capture();
    out = run_eager();
    draws_per_step_ = gen_->end_graph_capture();
    // The next replay draws where this one stops.
    kernels::add_i64(detail::ctx_of(rng_counter_), 1, rng_counter_.data<int64_t>(),
                     static_cast<int64_t>(draws_per_step_));
    graph->end_capture();
  } catch (const std::exception& e) {
    graph->abort_capture();
    if (gen_->capturing_graph()) (void)gen_->end_graph_capture();
    alloc.close_private_pool();
    out = Tensor();
    graph.reset();
    alloc.release_private_pool(pool);
    alloc.unpin_arena(pinned);
    gen_->set_offset(offset_before);
    const std::string msg = frugal::detail::str(
        "CapturedStep: capturing the step on ", device_, " failed, nothing ran (see ",
        "Note [Captured training steps] in train/captured_step.h): ", e.what());
    // Out of memory stays out of memory: callers retry smaller on it (frugal exits with 3).
    if (dynamic_cast<const OutOfMemoryError*>(&e) != nullptr) throw OutOfMemoryError(msg);
    FRUGAL_FAIL(msg);
  }
  alloc.close_private_pool();
  // The capture borrowed what it needed of the cache the eager steps left (Note [Private pools
  // for captured graphs]); the segments it left whole serve nobody now that every call replays,
  // so they go back (this waits for the device, outside the timed replays).
  alloc.empty_cache();
  pool_ = pool;
  pinned_arena_ = pinned;
  graph_ = std::move(graph);
  out_ = std::move(out);
  graph_->replay();  // capturing ran nothing: this is the step
  ++replays_;
}

void CapturedStep::replay() {
  graph_->replay();
  ++replays_;
  // The host generator keeps pace with the device counter, as if the step had run eagerly.
  gen_->set_offset(gen_->offset() + draws_per_step_);
}

}  // namespace frugal::train
