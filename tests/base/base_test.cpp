// Base types: dtype parsing, devices, shapes, broadcasting and half conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/device.h"
#include "base/dtype.h"
#include "base/error.h"
#include "base/half.h"
#include "base/scoped_value.h"
#include "base/shape.h"

using namespace frugal;

TEST(DType, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float16"), DType::f16);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'f8'"), std::string::npos);
  }
  EXPECT_EQ(promote(DType::f16, DType::f32), DType::f32);
  EXPECT_EQ(promote(DType::f16, DType::bf16), DType::f32);
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(parse_device("cuda:1"), Device::cuda(1));
  EXPECT_EQ(parse_device("cpu").str(), "cpu");
  EXPECT_EQ(parse_device("meta"), Device::meta());
  EXPECT_THROW(parse_device("tpu"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
  // Past INT_MAX: a frugal::Error naming the device, not std::out_of_range from stoi.
  EXPECT_THROW(parse_device("cuda:99999999999999999999"), Error);
  EXPECT_EQ(parse_device("cuda:2147483647"), Device::cuda(2147483647));
}

TEST(Shape, NumelStridesAndBroadcast) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(s.dim(-1), 2);
  EXPECT_EQ(broadcast_shapes(Shape{8, 1, 1, 3}, Shape{8, 5, 5, 3}, "mul"), (Shape{8, 5, 5, 3}));
  EXPECT_EQ(broadcast_shapes(Shape{3}, Shape{2, 1}, "add"), (Shape{2, 3}));
  try {
    broadcast_shapes(Shape{2, 3}, Shape{4, 3}, "add");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [4, 3] cannot be broadcast"),
              std::string::npos);
  }
}

TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(f16_to_float(float_to_f16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(70000.0f))));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  // 1 + 2^-11 is halfway between 1 and the next f16 (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 0.00048828125f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.0f + 1.0f / 128)), 3.0f);  // tie to even
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

namespace {
thread_local int t_setting = 0;
}  // namespace

TEST(ScopedValue, NestedScopesRestoreInReverseOrderEvenWhenUnwinding) {
  {
    ScopedValue<int> outer(t_setting, 1);
    EXPECT_EQ(t_setting, 1);
    {
      ScopedValue<int> inner(t_setting, 2);
      EXPECT_EQ(t_setting, 2);
    }
    EXPECT_EQ(t_setting, 1);
    try {
      ScopedValue<int> thrown(t_setting, 3);
      throw Error("unwind");
    } catch (const Error&) {
    }
    EXPECT_EQ(t_setting, 1);
  }
  EXPECT_EQ(t_setting, 0);
}
