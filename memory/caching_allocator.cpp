// The caching allocator's block logic: best fit, split, merge, cache, cap and retry. The policy is
// stated in caching_allocator.h; snapshot, invariants and the OOM message are in
// caching_allocator_debug.cpp.
#include "memory/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "base/error.h"
#include "memory/oom_injection.h"

namespace frugal::memory {

namespace {
constexpr size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
}  // namespace

size_t segment_bytes_for(size_t rounded) {
  if (rounded <= kSmallRequestMax) return kSmallSegmentBytes;
  if (rounded < kMidRequestMax) return kMidSegmentBytes;
  return round_up(rounded, kLargeRoundBytes);
}

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->addr) < std::tie(b->stream, b->size, b->addr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemorySource> source, Device device)
    : source_(std::move(source)), device_(device) {
  FRUGAL_CHECK(source_ != nullptr, "CachingAllocator(", device.str(), "): no memory source");
}

CachingAllocator::~CachingAllocator() {
  if (arena_ != nullptr) retired_.push_back(std::move(arena_));
  for (const auto& a : retired_) {
    if (a->bytes == 0) continue;
    try {
      source_->raw_free(reinterpret_cast<void*>(a->base));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "frugal: freeing the arena of %s failed: %s\n", device_.str().c_str(),
                   e.what());
    }
  }
  // Live DataPtrs must not outlive their allocator; process-wide allocators are never destroyed.
  for (auto& [addr, head] : segments_) {
    try {
      source_->raw_free(reinterpret_cast<void*>(addr));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "frugal: freeing a segment of %s failed: %s\n", device_.str().c_str(),
                   e.what());
    }
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

DataPtr CachingAllocator::allocate(size_t bytes, StreamId stream) {
  if (bytes == 0) return {};
  detail::check_injected_oom(device_, bytes);
  // No device has 2^62 bytes; past that, rounding the request (and its segment) could wrap to a
  // small size, and the block would share its address with the next allocation.
  if (bytes > kMaxRequestBytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.num_ooms++;  // an out-of-memory error like any other: counted and told
    }
    notify_memory_event(EventKind::oom, device_, bytes);  // Note [Allocation events]
    throw OutOfMemoryError(frugal::detail::str(device_.str(), " out of memory: tried to allocate ",
                                               bytes, " bytes, more than any device holds"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const size_t rounded = round_request(bytes);
  // A planned step's requests go to its arena before a private pool can take them: a step
  // captured while planned lives in the arena (Note [Captured steps in the arena]).
  bool scratch = false;  // kernel scratch of a planned step that the arena could not hold
  if (planned_step_ && stream == kDefaultStream && std::this_thread::get_id() == step_thread_) {
    if (plannable(current_category())) {
      if (void* p = take_planned(rounded, bytes)) return DataPtr(p, bytes, this, rounded);
    } else if (in_scratch_scope()) {
      if (void* p = take_scratch(rounded, bytes)) return DataPtr(p, bytes, this, rounded);
      scratch = true;
    }
  }
  if (open_pool_ != kDefaultStream && stream == kDefaultStream &&
      std::this_thread::get_id() == pool_thread_) {
    stream = open_pool_;
  }
  const bool small_pool = rounded <= kSmallRequestMax;
  // A block that lives for the whole run takes no cached block larger than its own segment
  // would be (Note [Flat resident tensors]).
  const bool resident_block = !small_pool && in_resident_block_scope();
  Block* b = find_free(rounded, stream, small_pool);
  if (b != nullptr && resident_block && b->size > round_up(rounded, kLargeRoundBytes)) {
    b = nullptr;
  }
  if (b == nullptr && stream == open_pool_ && stream != kDefaultStream) {
    // A capture borrows cached free bytes before mapping a segment of its own (Note [Private
    // pools for captured graphs]).
    if (Block* lent = find_free(rounded, kDefaultStream, small_pool); lent != nullptr) {
      if (small_pool) {  // the request's bytes only: eager small requests go on between replays
        take(lent, rounded, bytes);
        lent->stream = stream;
        return DataPtr(reinterpret_cast<void*>(lent->addr), bytes, this, lent->size);
      }
      // A large block is lent whole, and what the request leaves of it serves the capture's
      // later requests (a cached scratch segment holds each scratch in turn).
      // Merged with a free neighbour the pool already holds, as a freed block is: side by side
      // but apart, the two could not serve a larger request (a new segment was mapped), and the
      // invariants' check failed.
      erase_free(lent);
      lent->stream = stream;
      merge_and_insert_free(lent);  // may absorb lent into its neighbour
      b = find_free(rounded, stream, small_pool);
    }
  }
  if (scratch && !small_pool) largest_scratch_ = std::max(largest_scratch_, rounded);
  if (b == nullptr) {
    // Scratch the arena could not hold comes back every step: a segment of the largest such
    // scratch's size, which every later one fits in (they live one kernel call each), not a
    // 20 MiB one it would share with what lives on (Note [Kernel scratch]).
    const size_t seg_bytes = scratch && !small_pool ? round_up(largest_scratch_, kLargeRoundBytes)
                             : resident_block       ? round_up(rounded, kLargeRoundBytes)
                                                    : segment_bytes_for(rounded);
    if (!try_new_segment(seg_bytes, stream, small_pool, &b)) {
      // Cached segments may be what stands between us and the memory: give them back, once.
      // Not while a graph is captured: nothing may free device memory then (cudaFree inside a
      // capture), as PyTorch's allocator skips the release while a capture is underway.
      const bool release = open_pool_ == kDefaultStream;
      if (release) {
        stats_.num_alloc_retries++;
        release_free_segments();
      }
      if (!release || !try_new_segment(seg_bytes, stream, small_pool, &b)) {
        stats_.num_ooms++;
        throw_oom(bytes, rounded, seg_bytes, stream);
      }
    }
  }
  take(b, rounded, bytes);  // b->size: what allocated_bytes grew by, unsplit tail included
  return DataPtr(reinterpret_cast<void*>(b->addr), bytes, this, b->size);
}

CachingAllocator::Block* CachingAllocator::find_free(size_t rounded, StreamId stream,
                                                     bool small_pool) {
  Pool& pool = pool_of(small_pool);
  Block key;
  key.stream = stream;
  key.size = rounded;
  key.addr = 0;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  return *it;
}

void* CachingAllocator::reserve_segment(size_t bytes) {
  const auto reserved = static_cast<size_t>(stats_.reserved_bytes.current);
  if (cap_bytes_ != 0 && reserved + bytes > cap_bytes_) return nullptr;
  void* ptr = source_->raw_alloc(bytes);  // may throw on a driver error: nothing changed yet
  if (ptr == nullptr) return nullptr;
  stats_.reserved_bytes.add(static_cast<int64_t>(bytes));
  stats_.segment.add(1);
  notify_memory_event(EventKind::segment_map, device_, bytes, reinterpret_cast<uintptr_t>(ptr));
  return ptr;
}

void CachingAllocator::return_segment(void* ptr, size_t bytes) {
  stats_.reserved_bytes.sub(static_cast<int64_t>(bytes));
  stats_.segment.sub(1);
  notify_memory_event(EventKind::segment_unmap, device_, bytes, reinterpret_cast<uintptr_t>(ptr));
  source_->raw_free(ptr);
}

bool CachingAllocator::try_new_segment(size_t seg_bytes, StreamId stream, bool small_pool,
                                       Block** out) {
  auto head = std::make_unique<Block>();  // before the segment, so bad_alloc cannot leak one
  head->size = seg_bytes;
  head->stream = stream;
  head->small_pool = small_pool;
  void* ptr = reserve_segment(seg_bytes);
  if (ptr == nullptr) return false;
  head->addr = reinterpret_cast<uintptr_t>(ptr);
  *out = head.release();
  segments_.emplace((*out)->addr, *out);
  insert_free(*out);
  return true;
}

// Hands out free block `b` for a request of `requested` bytes (`rounded` after rounding),
// splitting off the tail when the pool's rule says it is worth keeping.
void CachingAllocator::take(Block* b, size_t rounded, size_t requested) {
  erase_free(b);
  const size_t remainder = b->size - rounded;
  const bool split = b->small_pool ? remainder >= kSmallSplitMin : remainder > kLargeSplitMin;
  if (split) {
    auto* rest = new Block;
    rest->addr = b->addr + rounded;
    rest->size = remainder;
    rest->stream = b->stream;
    rest->small_pool = b->small_pool;
    rest->last_use = b->last_use;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    insert_free(rest);
  }
  b->allocated = true;
  b->requested = requested;
  b->last_use = static_cast<uint64_t>(stats_.allocation.allocated) + 1;  // this allocation's number
  allocated_.emplace(b->addr, b);
  const auto n = static_cast<int64_t>(b->size);
  stats_.allocated_bytes.add(n);
  stats_.active_bytes.add(n);
  stats_.requested_bytes.add(static_cast<int64_t>(requested));
  stats_.allocation.add(1);
}

// A free block counts as inactive split while it shares its segment with other blocks. That
// state only changes when the block itself is merged or split, i.e. outside the pool, so
// counting on insert and erase keeps the stat exact.
void CachingAllocator::insert_free(Block* b) {
  pool_of(b->small_pool).insert(b);
  if (b->is_split()) stats_.inactive_split_bytes.add(static_cast<int64_t>(b->size));
}

void CachingAllocator::erase_free(Block* b) {
  pool_of(b->small_pool).erase(b);
  if (b->is_split()) stats_.inactive_split_bytes.sub(static_cast<int64_t>(b->size));
}

void CachingAllocator::release(void* ptr, size_t /*size*/) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (release_planned(reinterpret_cast<uintptr_t>(ptr))) return;
  auto it = allocated_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocated_.end()) {
    // release() cannot throw; a double free or foreign pointer is a bug worth shouting about.
    std::fprintf(stderr, "frugal: %s caching allocator: release of unknown pointer %p\n",
                 device_.str().c_str(), ptr);
    return;
  }
  Block* b = it->second;
  if (open_pool_ != kDefaultStream && b->stream != open_pool_) {
    held_[open_pool_].push_back(b);  // a captured kernel may use it: kept until the pool goes
    return;
  }
  free_block(b);
}

void CachingAllocator::free_block(Block* b) {
  allocated_.erase(b->addr);
  const auto n = static_cast<int64_t>(b->size);
  stats_.allocated_bytes.sub(n);
  stats_.active_bytes.sub(n);
  stats_.requested_bytes.sub(static_cast<int64_t>(b->requested));
  stats_.allocation.sub(1);
  b->allocated = false;
  b->requested = 0;
  merge_and_insert_free(b);
}

// Joins free block `b` (in no free set) with its free neighbours of the same stream: a block lent
// to a private pool shares its segment with default-stream blocks but not their free bytes.
void CachingAllocator::merge_and_insert_free(Block* b) {
  auto mergeable = [&](const Block* other) {
    return other != nullptr && !other->allocated && other->stream == b->stream;
  };
  if (Block* next = b->next; mergeable(next)) {  // absorb the next block
    erase_free(next);
    b->size += next->size;
    b->last_use = std::max(b->last_use, next->last_use);
    b->next = next->next;
    if (b->next != nullptr) b->next->prev = b;
    delete next;
  }
  if (Block* prev = b->prev; mergeable(prev)) {  // the previous absorbs b
    erase_free(prev);
    prev->size += b->size;
    prev->last_use = std::max(prev->last_use, b->last_use);
    prev->next = b->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    delete b;
    b = prev;
  }
  insert_free(b);
}

void CachingAllocator::open_private_pool(StreamId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  FRUGAL_CHECK(pool != kDefaultStream, "open_private_pool(", device_.str(),
               "): the default stream's tag is not a private pool");
  FRUGAL_CHECK(open_pool_ == kDefaultStream, "open_private_pool(", device_.str(), "): pool ",
               open_pool_, " is still open; captures into private pools do not nest");
  open_pool_ = pool;
  pool_thread_ = std::this_thread::get_id();
  live_pools_.insert(pool);
}

void CachingAllocator::close_private_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  open_pool_ = kDefaultStream;
}

void CachingAllocator::release_private_pool(StreamId pool) {
  std::lock_guard<std::mutex> lock(mu_);
  FRUGAL_CHECK(pool != open_pool_, "release_private_pool(", device_.str(), "): pool ", pool,
               " is still open");
  live_pools_.erase(pool);
  if (auto it = held_.find(pool); it != held_.end()) {
    std::vector<Block*> held = std::move(it->second);
    held_.erase(it);
    for (Block* b : held) free_block(b);
  }
  // The pool's blocks, in its own segments and lent from cached ones, go back to the default
  // stream; free ones join their free default-stream neighbours.
  std::vector<Block*> pool_blocks;
  for (auto& [addr, head] : segments_) {
    for (Block* b = head; b != nullptr; b = b->next) {
      if (b->stream == pool) pool_blocks.push_back(b);
    }
  }
  for (Block* b : pool_blocks) {  // a merge deletes only default-stream blocks: none of these
    if (b->allocated) {
      b->stream = kDefaultStream;
    } else {  // the free set is ordered by stream first
      erase_free(b);
      b->stream = kDefaultStream;
      merge_and_insert_free(b);
    }
  }
}

void CachingAllocator::free_segment(Block* head) {
  erase_free(head);
  segments_.erase(head->addr);
  void* ptr = reinterpret_cast<void*>(head->addr);
  const size_t bytes = head->size;
  delete head;
  return_segment(ptr, bytes);
}

size_t CachingAllocator::release_free_segments() {
  size_t freed = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* head = it->second;
    ++it;  // free_segment erases head's entry
    if (!head->allocated && head->next == nullptr && live_pools_.count(head->stream) == 0) {
      freed += head->size;
      free_segment(head);
    }
  }
  return freed;
}

size_t CachingAllocator::trim_cache(size_t target_reserved, int64_t unused_since) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Block*> free_segments;
  for (const auto& [addr, head] : segments_) {
    if (!head->allocated && head->next == nullptr && live_pools_.count(head->stream) == 0 &&
        head->last_use < static_cast<uint64_t>(unused_since)) {
      free_segments.push_back(head);
    }
  }
  // Largest first: the fewest segments given back, and the small ones that serve most requests
  // stay.
  std::sort(free_segments.begin(), free_segments.end(),
            [](const Block* a, const Block* b) { return a->size > b->size; });
  size_t freed = 0;
  for (Block* head : free_segments) {
    if (static_cast<size_t>(stats_.reserved_bytes.current) <= target_reserved) break;
    freed += head->size;
    free_segment(head);
  }
  return freed;
}

bool CachingAllocator::capturing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_pool_ != kDefaultStream;
}

int64_t CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(release_free_segments());
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reset_peaks();
}

void CachingAllocator::set_memory_cap_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cap_bytes_ = bytes;
}

void CachingAllocator::set_memory_fraction(double fraction) {
  FRUGAL_CHECK(fraction > 0.0 && fraction <= 1.0, "set_memory_fraction(", device_.str(),
               "): fraction ", fraction, " is not in (0, 1]");
  const size_t total = source_->total_bytes();
  // At least one byte: 0 would mean "no cap", the opposite of a tiny fraction.
  const auto cap = static_cast<size_t>(fraction * static_cast<double>(total));
  set_memory_cap_bytes(cap == 0 ? 1 : cap);
}

size_t CachingAllocator::memory_cap_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cap_bytes_;
}

}  // namespace frugal::memory
