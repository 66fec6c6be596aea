// CapturedStep where graphs do not exist (every call eager), and the generator's capture mode
// that lets a captured dropout draw fresh masks on every replay. The captured path itself is in
// tests/gpu/captured_step_gpu_test.cpp.
#include "train/captured_step.h"

#include <gtest/gtest.h>

#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"

using namespace frugal;

TEST(CapturedStep, OnTheCpuEveryCallRunsTheStepEagerly) {
  int calls = 0;
  Tensor counter = zeros({1});
  train::CapturedStep step(Device::cpu(), [&] {
    ++calls;
    Tensor next = add(counter, 1.0);
    copy_(counter, next);
    return next;
  });
  for (int i = 1; i <= 4; ++i) {
    EXPECT_TRUE(step.next_call_is_eager());
    EXPECT_EQ(step().item(), i);
  }
  EXPECT_EQ(calls, 4);
  EXPECT_FALSE(step.captured());
  EXPECT_EQ(step.replays(), 0);
  EXPECT_EQ(step.graph_nodes(), 0);
}

TEST(CapturedStep, BadArgumentsAreNamed) {
  auto fn = [] { return zeros({1}); };
  EXPECT_THROW(train::CapturedStep(Device::cpu(), fn, {.warmup = 0}), Error);
  EXPECT_THROW(train::CapturedStep(Device::cpu(), nullptr), Error);
}

TEST(GeneratorCapture, DropoutUnderCaptureDrawsWhatTheEagerDropoutDraws) {
  Generator gen(11);
  Tensor x = ones({1000});
  gen.set_offset(500);
  Tensor eager1 = nn::functional::dropout(x, 0.5, true, gen);
  Tensor eager2 = nn::functional::dropout(x, 0.5, true, gen);
  ASSERT_NE(eager1.to_vector(), eager2.to_vector());

  // A "replay" reads its base from the counter; on the CPU the counter is host memory.
  gen.set_offset(500);
  uint64_t counter = 500;
  gen.begin_graph_capture(&counter);
  EXPECT_TRUE(gen.capturing_graph());
  Tensor captured = nn::functional::dropout(x, 0.5, true, gen);
  EXPECT_EQ(captured.to_vector(), eager1.to_vector());
  const Generator::Draw d = gen.draw(10);
  EXPECT_EQ(d.offset, 1000u);  // relative to the capture's start
  EXPECT_EQ(d.offset_base, &counter);
  EXPECT_THROW(gen.take(1), Error);  // an offset by value would be frozen into the graph
  Generator other(3);
  EXPECT_THROW(nn::functional::dropout(x, 0.5, true, other), Error);
  EXPECT_EQ(gen.end_graph_capture(), 1010u);
  EXPECT_FALSE(gen.capturing_graph());
  EXPECT_NO_THROW(other.take(1));  // capture over: every generator draws again

  // The mask follows the counter, not the host offset: with the counter at 1500, where the
  // second eager dropout started, the capture draws the second eager mask.
  gen.set_offset(500);
  counter = 1500;
  gen.begin_graph_capture(&counter);
  Tensor replayed = nn::functional::dropout(x, 0.5, true, gen);
  EXPECT_EQ(gen.end_graph_capture(), 1000u);
  EXPECT_EQ(replayed.to_vector(), eager2.to_vector());
}
