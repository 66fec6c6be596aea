// FRUGAL_GPU_CHECK_GEN (base/gpu_check.h), the check behind CUDA_CHECK, CUDNN_CHECK, CUBLAS_CHECK
// and memory/'s FRUGAL_MEMORY_CUDA_CHECK, with a stand-in library so it runs without a GPU.
#include "base/gpu_check.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace {

enum FakeStatus { kFakeOk = 0, kFakeBusy = 7 };
const char* fake_text(FakeStatus s) { return s == kFakeBusy ? "device busy" : "fine"; }
FakeStatus fake_call(FakeStatus s) { return s; }

#define FAKE_CHECK(stmt) FRUGAL_GPU_CHECK_GEN("Fake", kFakeOk, stmt, fake_text, fail_gpu)
#define FAKE_CHECK_NOTHROW(stmt) FRUGAL_GPU_CHECK_GEN("Fake", kFakeOk, stmt, fake_text, warn_gpu)

}  // namespace

TEST(GpuCheck, AFailedCallThrowsNamingLibraryCodeTextStatementAndPlace) {
  EXPECT_NO_THROW(FAKE_CHECK(fake_call(kFakeOk)));
  try {
    FAKE_CHECK(fake_call(kFakeBusy));
    FAIL() << "expected frugal::Error";
  } catch (const frugal::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Fake error 7 (device busy) in `fake_call(kFakeBusy)`"), std::string::npos)
        << m;
    EXPECT_NE(m.find("gpu_check_test.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("TestBody"), std::string::npos) << m;  // the function
  }
}

TEST(GpuCheck, TheNothrowFormReportsAndReturns) {
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(FAKE_CHECK_NOTHROW(fake_call(kFakeBusy)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("frugal warning: Fake error 7 (device busy)"), std::string::npos) << err;
}
