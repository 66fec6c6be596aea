// The caching allocator of one CUDA device (PyTorch's c10 design): segments come from a
// DeviceMemorySource and are split into blocks, freed blocks stay cached for reuse.
//
// Policy (the constants below are the whole of it):
//   - every request is rounded up to kRoundBytes (512 B);
//   - small pool: rounded requests <= kSmallRequestMax (1 MiB) are carved from kSmallSegmentBytes
//     (2 MiB) segments; large pool: requests < kMidRequestMax (10 MiB) get kMidSegmentBytes
//     (20 MiB) segments, larger ones a segment rounded up to kLargeRoundBytes (2 MiB);
//     the two pools never share a segment;
//   - best fit: the free block with the smallest size >= request on the same stream, ties broken
//     by the lowest address (free blocks are ordered by (stream, size, address));
//   - split: the unused tail of a block becomes a free block when it is >= kSmallSplitMin (512 B)
//     in the small pool, or > kLargeSplitMin (1 MiB) in the large pool; otherwise the whole block
//     is handed out (allocated counts it, requested does not);
//   - merge: a freed block absorbs its free neighbours in the same segment;
//   - cache: freed blocks stay with their stream's pool; empty_cache() returns whole free
//     segments to the source, never part of a segment, and says how many bytes it gave back;
//   - cap: a segment that would push reserved over memory_cap_bytes() counts as a failed raw_alloc;
//   - retry: on a failed raw_alloc or cap hit, release every cached whole segment
//     (num_alloc_retries++), try once more, then throw frugal::OutOfMemoryError (num_ooms++)
//     naming the request, cap, device total/free, allocated and reserved-but-unallocated bytes.
// Streams are tags: a block freed on stream s is only reused on s. Cross-stream use
// (record_stream) is not tracked, so active == allocated. One mutex guards everything.
// Private pools (Note [Private pools for captured graphs]) reuse the tags: while one is open,
// the opening thread's default-stream requests are served under the pool's tag instead.
// A step plan (Note [Planned steps] in step_trace.h) adds one more segment, the arena: during a
// planned step the stepping thread's forward and backward requests on the default stream are
// matched against the plan and handed out at their planned offsets, and its kernel scratch is put
// in the smallest run of arena bytes free at that moment that holds it (Note [Kernel scratch] in
// events.h); the rest, and every request the arena cannot serve, take the path above. Arena
// blocks count as allocated like any other.
//
//   CachingAllocator a(make_cuda_memory_source(0), Device::cuda(0));
//   DataPtr p = a.allocate(3000);           // 3072 B block in a new 2 MiB segment
//   p.reset();                              // cached: the next 3000 B request gets it again
//   int64_t freed = a.empty_cache();        // 2 MiB: the segment goes back to cudaFree
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "memory/allocator.h"
#include "memory/device_memory_source.h"
#include "memory/rounding.h"
#include "memory/step_trace.h"

namespace frugal::memory {

// The largest request allocate() considers; larger ones fail as out of memory.
constexpr size_t kMaxRequestBytes = size_t{1} << 62;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSmallRequestMax = 1 * kMiB;
constexpr size_t kSmallSegmentBytes = 2 * kMiB;
constexpr size_t kMidRequestMax = 10 * kMiB;  // exclusive: a 10 MiB request gets its own segment
constexpr size_t kMidSegmentBytes = 20 * kMiB;
constexpr size_t kLargeRoundBytes = 2 * kMiB;
constexpr size_t kSmallSplitMin = 512;       // split when remainder >= this (small pool)
constexpr size_t kLargeSplitMin = 1 * kMiB;  // split when remainder > this (large pool)

using StreamId = uint64_t;
constexpr StreamId kDefaultStream = 0;

// Bytes of the segment a new block of `rounded` bytes is carved from.
size_t segment_bytes_for(size_t rounded);

struct BlockSnapshot {
  size_t offset = 0;     // from the segment's start
  size_t size = 0;       // rounded block size
  size_t requested = 0;  // 0 when free
  bool allocated = false;
  StreamId stream = kDefaultStream;  // its segment's, or the private pool it is lent to
};

struct SegmentSnapshot {
  uintptr_t address = 0;
  size_t size = 0;
  StreamId stream = kDefaultStream;
  bool small_pool = false;
  bool arena = false;                 // a step plan's arena (Note [Planned steps])
  std::vector<BlockSnapshot> blocks;  // by address, covering the segment exactly
};

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(std::unique_ptr<DeviceMemorySource> source, Device device);
  ~CachingAllocator() override;  // returns every segment to the source
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  DataPtr allocate(size_t bytes) override { return allocate(bytes, kDefaultStream); }
  DataPtr allocate(size_t bytes, StreamId stream);
  MemoryStats stats() const override;
  void reset_peak_stats() override;
  int64_t empty_cache() override;
  Device device() const override { return device_; }

  // 0 means no cap. A cap below the current reserved bytes only affects later segments.
  void set_memory_cap_bytes(size_t bytes) override;
  // Cap at `fraction` (0, 1] of the source's total bytes, like set_per_process_memory_fraction.
  void set_memory_fraction(double fraction);
  size_t memory_cap_bytes() const override;

  // Note [Private pools for captured graphs]
  // A captured CUDA graph replays its kernels at the addresses they had during capture, so the
  // memory the capture touched must not be handed to anyone else while the graph lives:
  //   - while a pool is open, default-stream requests from the thread that opened it are served
  //     from blocks tagged `pool` (any tag other than a real stream's), so the graph's
  //     temporaries never share a block with memory allocated outside it. A request the pool's
  //     free blocks cannot serve borrows a free block of the default stream's cached segments
  //     (a large one whole, a small one its request's bytes) before a segment of the pool's own
  //     is mapped: the block is the pool's from then on, and
  //     a captured step reserves no more than the eager step it copies (the loss and the
  //     scratch the planned arena cannot hold fit in bytes the eager steps left free);
  //   - a block allocated before the pool opened and freed while it is open (the last step's
  //     gradients, say) may have been read by a captured kernel: it is held, still counted as
  //     allocated, until release_private_pool;
  //   - close_private_pool stops the redirection; the pool's free blocks stay reserved for later
  //     replays and captures into the same pool (reopen it with open_private_pool);
  //   - release_private_pool (the graph is gone) frees the held blocks and retags the pool's
  //     blocks to the default stream, so their memory serves everyone again.
  // PyTorch's caching allocator keeps a private pool per graph for the same reason.
  // empty_cache and trim_cache keep the free segments of a pool until it is released (a replay
  // writes to them), as PyTorch's empty_cache keeps a live graph's pool.
  void open_private_pool(StreamId pool);
  void close_private_pool();
  void release_private_pool(StreamId pool);
  bool capturing() const;  // a private pool is open: a graph is being captured

  // Gives whole free segments back, largest first, until reserved is at most `target_reserved`
  // (or nothing free is left); returns the bytes given back. empty_cache() gives back all.
  // With `unused_since`, only segments no allocation numbered from it on (MemoryStats::allocation
  // .allocated counts them: the n-th allocation is number n) has used: those the steps since
  // have not needed, so giving them back makes no later step grow again.
  size_t trim_cache(size_t target_reserved, int64_t unused_since = INT64_MAX);

  // Note [Planned steps]: install_plan makes `plan` current, with its arena as one new segment
  // (counted in reserved and under the cap; cached free segments are released first, since the
  // plan replaces what they were kept for). False, with no plan in force, when the arena does not
  // fit. A plan that fits the arena in force keeps it; an arena still holding live blocks when it
  // is given up stays reserved until its last block is released (retired_arena_bytes).
  bool install_plan(StepPlan plan);
  // Note [Captured steps in the arena]
  // A planned step captured as a CUDA graph takes its planned and scratch bytes from the arena, at
  // the offsets every replay then writes again; only its other requests go to the private pool.
  // The arena must outlive the graph, whatever plans come after: pin_arena (before the capture)
  // keeps the current arena reserved until unpin_arena with the returned handle, even when a
  // plan replaces it. Replays allocate nothing, so no other step writes there while the graph
  // lives unless it is itself planned (a planned eager step between replays would share the
  // arena in stream order, as planned steps always do). Returns 0 when there is no arena.
  uintptr_t pin_arena();
  void unpin_arena(uintptr_t handle);
  void remove_plan();
  bool has_plan() const;
  size_t arena_bytes() const;          // of the current plan; 0 without one
  size_t retired_arena_bytes() const;  // replaced arenas still reserved for their live blocks
  // Between these two calls the calling thread's plannable requests follow the plan.
  void begin_planned_step();
  PlanReplay end_planned_step();

  std::vector<SegmentSnapshot> snapshot() const;
  // Walks every segment and checks links, coverage, pools and stats; throws frugal::Error naming
  // the first broken invariant. For tests and debugging (linear in the number of blocks).
  void check_invariants() const;

  DeviceMemorySource& source() { return *source_; }

 protected:
  void release(void* ptr, size_t size) noexcept override;

 private:
  struct Block {
    uintptr_t addr = 0;
    size_t size = 0;
    size_t requested = 0;
    StreamId stream = kDefaultStream;
    bool small_pool = false;
    bool allocated = false;
    uint64_t last_use = 0;  // the number of the last allocation any part of it served
    Block* prev = nullptr;  // neighbours in the same segment, by address
    Block* next = nullptr;
    bool is_split() const { return prev != nullptr || next != nullptr; }
  };
  struct BlockOrder {  // (stream, size, address): lower_bound finds the best fit
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Pool& pool_of(bool small_pool) { return small_pool ? small_free_ : large_free_; }
  Block* find_free(size_t rounded, StreamId stream, bool small_pool);
  // `bytes` from the source under the cap, counted as one reserved segment; null when the cap or
  // the device refuses. return_segment gives one back.
  void* reserve_segment(size_t bytes);
  void return_segment(void* ptr, size_t bytes);
  bool try_new_segment(size_t seg_bytes, StreamId stream, bool small_pool, Block** out);
  void take(Block* b, size_t rounded, size_t requested);
  void insert_free(Block* b);
  void erase_free(Block* b);
  size_t release_free_segments();  // whole free segments back to the source; returns bytes
  void free_block(Block* b);       // back to its stream's free blocks, merged with free neighbours
  void merge_and_insert_free(Block* b);
  void free_segment(Block* head);
  struct Arena {
    uintptr_t base = 0;
    size_t bytes = 0;
    struct Live {
      size_t size, requested;
      bool carried;  // planned to outlive the step (Note [Gradients carried into the next step])
    };
    std::map<uintptr_t, Live> live;  // by address
    int pins = 0;                    // captured graphs that replay in it
    bool contains(uintptr_t a) const { return a >= base && a < base + bytes; }
    bool occupied(uintptr_t a, size_t size) const;
  };
  void* take_planned(size_t rounded, size_t requested);
  void* take_scratch(size_t rounded, size_t requested);  // Note [Kernel scratch]
  void* take_scratch_clear_of(size_t rounded, size_t requested, size_t lookahead);
  void* hand_out_in_arena(uintptr_t addr, size_t rounded, size_t requested, bool carried);
  bool release_planned(uintptr_t addr);  // false: not an arena block
  Arena* arena_holding(uintptr_t addr);
  void retire_arena();
  void free_if_retired_and_unused(Arena* arena);
  void free_arena(std::unique_ptr<Arena> arena);
  [[noreturn]] void throw_oom(size_t bytes, size_t rounded, size_t seg_bytes, StreamId stream);

  std::unique_ptr<DeviceMemorySource> source_;
  Device device_;
  mutable std::mutex mu_;
  MemoryStats stats_;
  size_t cap_bytes_ = 0;
  Pool small_free_;
  Pool large_free_;
  std::unordered_map<uintptr_t, Block*> allocated_;  // by address
  std::map<uintptr_t, Block*> segments_;             // segment head blocks, by address
  // The open private pool and the thread it serves (Note [Private pools for captured graphs]).
  StreamId open_pool_ = kDefaultStream;
  std::thread::id pool_thread_;
  std::map<StreamId, std::vector<Block*>> held_;  // blocks freed into a pool's keeping
  std::set<StreamId> live_pools_;                 // opened and not released yet
  // The step plan in force and its replay (Note [Planned steps]).
  StepPlan plan_;
  bool has_plan_ = false;
  std::unique_ptr<Arena> arena_;                 // the current plan's
  std::vector<std::unique_ptr<Arena>> retired_;  // replaced plans', until their last block goes
  bool planned_step_ = false;
  std::thread::id step_thread_;
  struct SizeQueue {
    std::vector<size_t> entries;  // of plan_, in order
    size_t next = 0;              // the first not yet matched in this step
  };
  std::unordered_map<size_t, SizeQueue> by_size_;
  size_t cursor_ = 0;  // one past the latest entry of plan_ handed out in this step
  static constexpr size_t kScratchLookahead = 8;  // entries scratch keeps clear of
  size_t largest_scratch_ = 0;  // the largest scratch the arena could not hold, rounded
  PlanReplay replay_;
};

}  // namespace frugal::memory
