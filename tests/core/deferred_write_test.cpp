// Note [Deferred writes] (core/tensor.h): a tensor's bytes written on their first read, once,
// by whoever reads them; a reader that asks first can leave them unwritten.
#include <gtest/gtest.h>

#include <memory>

#include "core/factory.h"
#include "core/ops.h"
#include "core/tensor.h"

using namespace frugal;

namespace {

// Writes `value` into every element and counts its runs.
class FillWrite final : public DeferredWrite {
 public:
  FillWrite(int64_t n, float value, int* runs) : n_(n), value_(value), runs_(runs) {}
  void write(void* out) const override {
    ++*runs_;
    for (int64_t i = 0; i < n_; ++i) static_cast<float*>(out)[i] = value_;
  }

 private:
  int64_t n_;
  float value_;
  int* runs_;
};

}  // namespace

TEST(DeferredWrite, RunsOnceOnTheFirstReadOfAnyAlias) {
  int runs = 0;
  Tensor t = Tensor::empty({2, 3});
  t.defer_write(std::make_shared<FillWrite>(6, 2.5f, &runs));
  Tensor alias = t.reshape({6});  // shares the storage
  ASSERT_NE(t.deferred_write(), nullptr);
  EXPECT_EQ(runs, 0) << "asking for the write does not run it";
  EXPECT_EQ(alias.to_vector(), std::vector<double>(6, 2.5));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(t.deferred_write(), nullptr);
  EXPECT_EQ(sum(t).item(), 15.0);
  EXPECT_EQ(runs, 1) << "written once";
}

TEST(DeferredWrite, AFullOverwriteDropsThePendingWrite) {
  int runs = 0;
  Tensor t = Tensor::empty({4});
  t.defer_write(std::make_shared<FillWrite>(4, 1.0f, &runs));
  copy_(t, full({4}, 7.0));
  EXPECT_EQ(t.deferred_write(), nullptr);
  EXPECT_EQ(t.to_vector(), std::vector<double>(4, 7.0)) << "not clobbered by the write later";
  Tensor u = Tensor::empty({4});
  u.defer_write(std::make_shared<FillWrite>(4, 1.0f, &runs));
  fill_(u, 5.0);
  EXPECT_EQ(u.to_vector(), std::vector<double>(4, 5.0));
  EXPECT_EQ(runs, 0) << "a write whose bytes are all overwritten is never run";
}

TEST(DeferredWrite, ACopyFromItsOwnBytesRunsTheWriteFirst) {
  int runs = 0;
  Tensor t = Tensor::empty({2, 2});
  t.defer_write(std::make_shared<FillWrite>(4, 3.0f, &runs));
  copy_(t, t.reshape({2, 2}));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(t.to_vector(), std::vector<double>(4, 3.0));
}

namespace {

class FailingWrite final : public DeferredWrite {
 public:
  explicit FailingWrite(int* runs) : runs_(runs) {}
  void write(void*) const override {
    ++*runs_;
    FRUGAL_CHECK(false, "the write's inputs are gone");
  }

 private:
  int* runs_;
};

}  // namespace

TEST(DeferredWrite, AWriteThatFailsStaysOwedAndEveryReadFails) {
  int runs = 0;
  Tensor t = Tensor::empty({4});
  t.defer_write(std::make_shared<FailingWrite>(&runs));
  EXPECT_THROW(t.to_vector(), Error);
  EXPECT_NE(t.deferred_write(), nullptr) << "no read may see the unwritten bytes";
  EXPECT_THROW(t.to_vector(), Error);
  EXPECT_EQ(runs, 2);
}

TEST(DeferredWrite, ASecondWriteOnTheSameBytesIsRefused) {
  int runs = 0;
  Tensor t = Tensor::empty({4});
  t.defer_write(std::make_shared<FillWrite>(4, 1.0f, &runs));
  try {
    t.defer_write(std::make_shared<FillWrite>(4, 2.0f, &runs));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already owe a write"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.to_vector(), std::vector<double>(4, 1.0)) << "the first write stands";
}
