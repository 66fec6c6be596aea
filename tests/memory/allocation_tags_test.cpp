// Allocation tags (Note [Allocation events]): op, module path, category and phase travel with
// every observed allocation; segment and out-of-memory events reach the observers too, and the
// observers that count live bytes ignore them.
#include <gtest/gtest.h>

#include "base/error.h"
#include "common/event_recorder.h"
#include "memory/allocator.h"
#include "memory/caching_allocator.h"
#include "memory/events.h"
#include "memory/fake_device_source.h"

using namespace frugal;
using namespace frugal::memory;

using test::EventRecorder;

TEST(AllocationTags, OpAndModuleScopesNameTheAllocation) {
  EventRecorder rec;
  {
    DataPtr outside = cpu_allocator().allocate(64);
    PhaseScope fw(Phase::forward);
    ModuleScope m("features");
    ModuleScope m3("3");
    OpScope op("conv2d");
    OpScope inner("matmul");  // an op inside an op keeps the outer name
    DataPtr a = cpu_allocator().allocate(128);
    EXPECT_EQ(a.tag()->op, "conv2d");
  }
  ASSERT_EQ(rec.events.size(), 4u);
  const AllocationTag* outside = rec.events[0].tag;
  EXPECT_EQ(outside->op, "");
  EXPECT_EQ(outside->module, nullptr);
  EXPECT_EQ(tag_name(rec.events[0]), "");
  const AllocationEvent& a = rec.events[1];
  EXPECT_EQ(a.tag->op, "conv2d");
  ASSERT_NE(a.tag->module, nullptr);
  EXPECT_EQ(*a.tag->module, "features.3");
  EXPECT_EQ(a.category(), Category::forward);
  EXPECT_EQ(a.tag->phase, Phase::forward);
  EXPECT_EQ(tag_name(a), "features.3/conv2d");
  // Released with the tag it was allocated under, whatever is current then.
  EXPECT_TRUE(rec.events[2].is_free());
  EXPECT_EQ(rec.events[2].tag, a.tag);
  EXPECT_EQ(rec.events[3].tag, outside);
}

TEST(AllocationTags, BackwardScopesReplaceAndTagsAreInterned) {
  EventRecorder rec;
  {
    OpScope fw("mul");
    DataPtr a = cpu_allocator().allocate(64);
    {
      std::string node = "conv2d";  // the engine names a node from a string it reuses
      OpScope bw(node.c_str(), /*backward=*/true);
      DataPtr b = cpu_allocator().allocate(64);
      EXPECT_EQ(b.tag()->op, "conv2d backward");
      node = "relu6";  // same buffer, new name: not the cached tag
      OpScope bw2(node.c_str(), /*backward=*/true);
      DataPtr c = cpu_allocator().allocate(64);
      EXPECT_EQ(c.tag()->op, "relu6 backward");
    }
    DataPtr d = cpu_allocator().allocate(64);
    EXPECT_EQ(d.tag(), a.tag());  // equal scopes: one record
    EXPECT_EQ(tag_name(rec.events.back()), "mul");
  }
  EXPECT_EQ(current_op(), nullptr);
}

TEST(AllocationTags, UnobservedAllocationsAreReleasedUntagged) {
  DataPtr early = cpu_allocator().allocate(64);
  EXPECT_EQ(early.tag(), nullptr);
  EventRecorder rec;
  early.reset();
  ASSERT_EQ(rec.events.size(), 1u);
  EXPECT_EQ(rec.events[0].id, 0u);
  EXPECT_EQ(rec.events[0].tag, untagged());
  EXPECT_EQ(rec.events[0].category(), Category::resident);
}

TEST(AllocationTags, SegmentsAndOutOfMemoryAreEvents) {
  CachingAllocator a(std::make_unique<frugal::memory::testing::FakeDeviceSource>(8 * kMiB),
                     Device::cuda(0));
  EventRecorder rec;
  PeakTracker peak(Device::cuda(0));
  {
    OpScope op("conv2d");
    DataPtr p = a.allocate(3000);  // maps a 2 MiB small segment
    EXPECT_THROW(a.allocate(30 * kMiB), OutOfMemoryError);
  }
  a.empty_cache();  // unmaps it
  std::vector<EventKind> kinds;
  for (const AllocationEvent& e : rec.events) kinds.push_back(e.kind);
  // The failed request retried after releasing cached segments (none was free) and failed.
  EXPECT_EQ(kinds, (std::vector<EventKind>{EventKind::segment_map, EventKind::alloc, EventKind::oom,
                                           EventKind::free, EventKind::segment_unmap}));
  EXPECT_EQ(rec.events[0].bytes, kSmallSegmentBytes);
  EXPECT_NE(rec.events[0].address, 0u);
  EXPECT_EQ(rec.events[0].tag->op, "conv2d");
  EXPECT_EQ(rec.events[2].bytes, 30 * kMiB);
  EXPECT_EQ(rec.events[4].bytes, kSmallSegmentBytes);
  EXPECT_STREQ(event_kind_name(EventKind::segment_unmap), "segment unmap");
  // The peak tracker counts tensors only, as the allocator counts them (3000 bytes asked for hold
  // a block of 3072): the segment's 2 MiB and the failed request are not.
  EXPECT_EQ(peak.peak_bytes(), 3072);
}
