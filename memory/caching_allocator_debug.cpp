// What the caching allocator tells people: the OOM message, segment snapshots, and the invariant
// check the tests run after every step.
#include <sstream>

#include "base/error.h"
#include "memory/caching_allocator.h"
#include "memory/oom_report.h"

namespace frugal::memory {

namespace {

std::string mib_and_bytes(size_t bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << static_cast<double>(bytes) / static_cast<double>(kMiB) << " MiB (" << bytes << " bytes)";
  return os.str();
}

}  // namespace

void CachingAllocator::throw_oom(size_t bytes, size_t rounded, size_t seg_bytes, StreamId stream) {
  notify_memory_event(EventKind::oom, device_, bytes);  // Note [Allocation events]
  const auto allocated = static_cast<size_t>(stats_.allocated_bytes.current);
  const auto reserved = static_cast<size_t>(stats_.reserved_bytes.current);
  const bool cap_hit = cap_bytes_ != 0 && reserved + seg_bytes > cap_bytes_;
  std::ostringstream os;
  os << device_.str() << " out of memory: tried to allocate " << mib_and_bytes(bytes);
  if (rounded != bytes) os << ", rounded to " << rounded << " bytes";
  os << ", needing a new segment of " << mib_and_bytes(seg_bytes) << " on stream " << stream
     << (cap_hit ? "; this would exceed the memory cap" : "; the device has no room for it")
     << ".\n  memory cap: " << (cap_bytes_ == 0 ? std::string("none") : mib_and_bytes(cap_bytes_));
  // The source is asked only now: a failing driver query must not hide the OOM itself.
  try {
    const size_t total = source_->total_bytes();
    os << "\n  device total: " << mib_and_bytes(total)
       << ", free: " << mib_and_bytes(source_->free_bytes());
    if (seg_bytes > total) os << " (the request alone is larger than the device)";
  } catch (const std::exception& e) {
    os << "\n  device total/free: unknown (" << e.what() << ")";
  }
  os << "\n  allocated: " << mib_and_bytes(allocated)
     << ", reserved but unallocated: " << mib_and_bytes(reserved - allocated) << " (reserved "
     << mib_and_bytes(reserved) << ", inactive split "
     << mib_and_bytes(static_cast<size_t>(stats_.inactive_split_bytes.current)) << ")"
     << "\n  allocations: " << stats_.allocation.current << ", segments: " << stats_.segment.current
     << ", retries: " << stats_.num_alloc_retries << ", OOMs: " << stats_.num_ooms << "\n"
     << stats_.summary(device_.str() + " memory at the failed request") << oom_report(device_);
  throw OutOfMemoryError(os.str());
}

std::vector<SegmentSnapshot> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SegmentSnapshot> out;
  out.reserve(segments_.size());
  for (const auto& [addr, head] : segments_) {
    SegmentSnapshot seg;
    seg.address = addr;
    seg.stream = head->stream;
    seg.small_pool = head->small_pool;
    for (const Block* b = head; b != nullptr; b = b->next) {
      seg.blocks.push_back({b->addr - addr, b->size, b->requested, b->allocated, b->stream});
      seg.size += b->size;
    }
    out.push_back(std::move(seg));
  }
  auto arena_snapshot = [&](const Arena& a) {  // live blocks and the gaps between them
    SegmentSnapshot seg;
    seg.address = a.base;
    seg.size = a.bytes;
    seg.arena = true;
    size_t at = 0;
    for (const auto& [addr, live] : a.live) {
      if (addr - a.base > at) seg.blocks.push_back({at, addr - a.base - at, 0, false});
      seg.blocks.push_back({addr - a.base, live.size, live.requested, true});
      at = addr - a.base + live.size;
    }
    if (at < a.bytes) seg.blocks.push_back({at, a.bytes - at, 0, false});
    out.push_back(std::move(seg));
  };
  if (arena_ != nullptr && arena_->bytes > 0) arena_snapshot(*arena_);
  for (const auto& a : retired_) arena_snapshot(*a);
  return out;
}

void CachingAllocator::check_invariants() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string where = "CachingAllocator(" + device_.str() + ")::check_invariants: ";
  size_t allocated = 0, requested = 0, reserved = 0, inactive_split = 0;
  size_t n_allocated = 0, n_small_free = 0, n_large_free = 0;
  for (const auto& [addr, head] : segments_) {
    FRUGAL_CHECK(head->addr == addr && head->prev == nullptr, where, "segment head at ", addr,
                 " is not the first block");
    const size_t seg_bytes = head->small_pool ? kSmallSegmentBytes : 0;
    size_t seg_size = 0;
    for (const Block* b = head; b != nullptr; b = b->next) {
      FRUGAL_CHECK(b->size > 0 && b->size % kRoundBytes == 0, where, "block at ", b->addr,
                   " has size ", b->size);
      FRUGAL_CHECK(b->addr == addr + seg_size, where, "block at ", b->addr,
                   " does not follow its neighbour (expected ", addr + seg_size, ")");
      // A block may be lent to a live private pool from a default-stream segment, or the
      // lent block may head one.
      const bool lent = b->stream != head->stream &&
                        (live_pools_.count(b->stream) > 0 || live_pools_.count(head->stream) > 0);
      FRUGAL_CHECK((b->stream == head->stream || lent) && b->small_pool == head->small_pool, where,
                   "block at ", b->addr, " disagrees with its segment on stream or pool");
      if (b->next != nullptr) {
        FRUGAL_CHECK(b->next->prev == b, where, "broken prev link after block ", b->addr);
        FRUGAL_CHECK(b->allocated || b->next->allocated || b->stream != b->next->stream, where,
                     "free neighbours at ", b->addr, " and ", b->next->addr, " were not merged");
      }
      const Pool& pool = head->small_pool ? small_free_ : large_free_;
      if (b->allocated) {
        auto it = allocated_.find(b->addr);
        FRUGAL_CHECK(it != allocated_.end() && it->second == b, where, "allocated block at ",
                     b->addr, " is not in the allocated map");
        FRUGAL_CHECK(pool.count(const_cast<Block*>(b)) == 0, where, "allocated block at ", b->addr,
                     " is in a free pool");
        FRUGAL_CHECK(b->requested > 0 && b->requested <= b->size, where, "block at ", b->addr,
                     " requested ", b->requested, " of ", b->size);
        allocated += b->size;
        requested += b->requested;
        n_allocated++;
      } else {
        FRUGAL_CHECK(pool.count(const_cast<Block*>(b)) == 1, where, "free block at ", b->addr,
                     " is missing from its pool");
        if (b->is_split()) inactive_split += b->size;
        (head->small_pool ? n_small_free : n_large_free)++;
      }
      seg_size += b->size;
    }
    FRUGAL_CHECK(seg_bytes == 0 || seg_size == seg_bytes, where, "small segment at ", addr,
                 " holds ", seg_size, " bytes");
    reserved += seg_size;
  }
  FRUGAL_CHECK(n_allocated == allocated_.size(), where, allocated_.size(),
               " pointers in the allocated map, ", n_allocated, " allocated blocks");
  // Arenas (Note [Planned steps]): live blocks inside, not overlapping, counted like blocks.
  size_t n_arenas = 0;
  auto check_arena = [&](const Arena& a) {
    size_t end = a.base;
    for (const auto& [addr, live] : a.live) {
      FRUGAL_CHECK(addr >= end && addr + live.size <= a.base + a.bytes, where, "arena block at ",
                   addr, " overlaps its neighbour or leaves the arena");
      end = addr + live.size;
      allocated += live.size;
      requested += live.requested;
      n_allocated++;
    }
    if (a.bytes > 0) n_arenas++;
    reserved += a.bytes;
  };
  if (arena_ != nullptr) check_arena(*arena_);
  for (const auto& a : retired_) check_arena(*a);
  FRUGAL_CHECK(n_small_free == small_free_.size() && n_large_free == large_free_.size(), where,
               "free pools hold ", small_free_.size(), " + ", large_free_.size(), " blocks, ",
               n_small_free, " + ", n_large_free, " free blocks found");
  auto eq = [&](const Stat& s, size_t v, const char* name) {
    FRUGAL_CHECK(s.current == static_cast<int64_t>(v) && s.peak >= s.current, where, name, " is ",
                 s.current, " (peak ", s.peak, "), the blocks say ", v);
  };
  eq(stats_.allocated_bytes, allocated, "allocated_bytes");
  eq(stats_.active_bytes, allocated, "active_bytes");
  eq(stats_.requested_bytes, requested, "requested_bytes");
  eq(stats_.reserved_bytes, reserved, "reserved_bytes");
  eq(stats_.inactive_split_bytes, inactive_split, "inactive_split_bytes");
  eq(stats_.allocation, n_allocated, "allocation");
  eq(stats_.segment, segments_.size() + n_arenas, "segment");
}

}  // namespace frugal::memory
