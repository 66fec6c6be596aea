// The f32 / f16 / bf16 comparison on the CPU with a small MobileNetV2 whose activations dominate
// its memory: row order, ratios, the 16-bit peak drop, what the peak covers, and the JSON, table
// and SVG renderings (the SVG checked for well-formedness by a small tag-stack parser).
#include "train/precision_compare.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/registry.h"

using namespace frugal;

namespace {

// Activations dominate: 16 images of 32x32 through a half-width MobileNetV2 (about 0.7M
// parameters) save a few MiB per step, against about 8 MiB of parameters+gradients+momentum.
train::CompareOptions small_options() {
  return {.model = "mobilenet_v2",
          .batch = 16,
          .channels = 1,
          .height = 32,
          .width = 32,
          .classes = 3,
          .width_multiplier = 0.5,
          .warmup = 1,
          .steps = 2,
          .seed = 7,
          .device = Device::cpu()};
}

const std::vector<train::CompareRow>& small_rows() {
  static const std::vector<train::CompareRow> rows = train::compare_precisions(small_options());
  return rows;
}

// Well-formed XML for what to_svg writes: elements, attributes in quotes, the five predefined
// entities, one root. Returns "" when well-formed, else what is wrong.
std::string xml_error(const std::string& s) {
  std::vector<std::string> stack;
  int roots = 0;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '&') {
      size_t semi = s.find(';', i);
      if (semi == std::string::npos) return "unterminated entity";
      std::string ent = s.substr(i + 1, semi - i - 1);
      if (ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos")
        return "unknown entity &" + ent + ";";
      i = semi + 1;
      continue;
    }
    if (s[i] == '>') return "stray '>' at " + std::to_string(i);
    if (s[i] != '<') {
      if (stack.empty() && !std::isspace(static_cast<unsigned char>(s[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    size_t end = i + 1;
    char quote = 0;
    for (; end < s.size(); ++end) {
      if (quote != 0) {
        if (s[end] == quote)
          quote = 0;
        else if (s[end] == '<')
          return "'<' inside an attribute";
      } else if (s[end] == '"' || s[end] == '\'') {
        quote = s[end];
      } else if (s[end] == '>') {
        break;
      }
    }
    if (end >= s.size()) return "unterminated tag at " + std::to_string(i);
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1))
        return "mismatched </" + tag.substr(1) + ">";
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    std::string name = tag.substr(0, tag.find_first_of(" \n\t/"));
    if (name.empty()) return "tag without a name";
    if (stack.empty() && ++roots > 1) return "more than one root element";
    if (!self_closing) stack.push_back(name);
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string trimmed(const std::string& s) { return s.substr(0, s.find_last_not_of(" \n") + 1); }

}  // namespace

TEST(PrecisionCompare, ThreeRowsInOrderWithRatiosToF32) {
  const auto& rows = small_rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].precision, DType::f32);
  EXPECT_EQ(rows[1].precision, DType::f16);
  EXPECT_EQ(rows[2].precision, DType::bf16);
  EXPECT_EQ(rows[0].peak_allocated_ratio, 1.0);
  EXPECT_EQ(rows[0].peak_reserved_ratio, 1.0);
  EXPECT_EQ(rows[0].images_per_second_ratio, 1.0);
  EXPECT_EQ(rows[0].loss_ratio, 1.0);
  for (const auto& r : rows) {
    SCOPED_TRACE(dtype_name(r.precision));
    EXPECT_DOUBLE_EQ(r.peak_allocated_ratio, static_cast<double>(r.peak_allocated) /
                                                 static_cast<double>(rows[0].peak_allocated));
    EXPECT_DOUBLE_EQ(r.peak_reserved_ratio, static_cast<double>(r.peak_reserved) /
                                                static_cast<double>(rows[0].peak_reserved));
    EXPECT_DOUBLE_EQ(r.images_per_second_ratio, r.images_per_second / rows[0].images_per_second);
    EXPECT_DOUBLE_EQ(r.loss_ratio, r.loss / rows[0].loss);
    EXPECT_GT(r.median_step_ms, 0.0);
    EXPECT_NEAR(r.images_per_second, 1000.0 * 16 / r.median_step_ms, 1e-9 * r.images_per_second);
    EXPECT_GE(r.peak_reserved, r.peak_allocated);
  }
}

// On the CPU 16-bit tensors compute in f32 (Note [CPU dtypes]): with one saved tensor per layer
// the f32 buffers of one layer's backward weigh about as much as the halved saved state, so the
// peak drops only a little (the GPU, which computes in 16 bits, is where the ratio shows).
TEST(PrecisionCompare, SixteenBitActivationsLowerThePeak) {
  const auto& rows = small_rows();
  for (size_t i = 1; i < 3; ++i) {
    SCOPED_TRACE(dtype_name(rows[i].precision));
    EXPECT_LT(rows[i].peak_allocated, rows[0].peak_allocated);
  }
}

TEST(PrecisionCompare, PeakCoversParametersGradientsMomentumAndBatch) {
  train::CompareOptions o = small_options();
  auto model = models::create(
      o.model, {.num_classes = o.classes, .in_channels = o.channels, .width = o.width_multiplier});
  const int64_t param_bytes = 4 * model->num_parameters();
  const int64_t batch_bytes = 4 * o.batch * o.height * o.width * o.channels;
  // Parameters, their f32 gradients and SGD momentum buffers are all live at the last step.
  for (const auto& r : small_rows()) {
    SCOPED_TRACE(dtype_name(r.precision));
    EXPECT_GT(r.peak_allocated, 3 * param_bytes + batch_bytes);
  }
}

TEST(PrecisionCompare, SameSeedSameStartAndFiniteLosses) {
  const auto& rows = small_rows();
  for (const auto& r : rows) {
    SCOPED_TRACE(dtype_name(r.precision));
    EXPECT_TRUE(std::isfinite(r.first_loss));
    EXPECT_TRUE(std::isfinite(r.loss));
    // Same weights and batch: the first forward differs by 16-bit rounding only.
    EXPECT_NEAR(r.first_loss, rows[0].first_loss, 0.05 * rows[0].first_loss);
  }
  // Only f16 scales its loss; 3 steps are too few to grow the scale, overflows only halve it.
  EXPECT_EQ(rows[0].loss_scale, 1.0);
  EXPECT_EQ(rows[2].loss_scale, 1.0);
  const double halvings = std::log2(65536.0 / rows[1].loss_scale);
  EXPECT_GE(halvings, 0.0);
  EXPECT_LE(halvings, 3.0);  // at most one per step
  EXPECT_EQ(halvings, std::floor(halvings));
  // The f32 run repeats bit for bit (same seed, same batch, deterministic CPU kernels).
  train::CompareRow again = train::run_precision(small_options(), DType::f32);
  EXPECT_EQ(again.first_loss, rows[0].first_loss);
  EXPECT_EQ(again.loss, rows[0].loss);
  EXPECT_EQ(again.peak_allocated, rows[0].peak_allocated);
}

TEST(PrecisionCompare, JsonHasTheConfigurationAndOneObjectPerRow) {
  const auto& rows = small_rows();
  nlohmann::json j = nlohmann::json::parse(train::to_json(small_options(), rows));
  EXPECT_EQ(j.at("model"), "mobilenet_v2");
  EXPECT_EQ(j.at("batch"), 16);
  EXPECT_EQ(j.at("input"), "1x32x32");
  EXPECT_EQ(j.at("classes"), 3);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("steps"), 2);
  EXPECT_EQ(j.at("warmup"), 1);
  EXPECT_EQ(j.at("seed"), 7);
  ASSERT_EQ(j.at("rows").size(), 3u);
  const char* names[] = {"f32", "f16", "bf16"};
  for (size_t i = 0; i < 3; ++i) {
    const auto& e = j["rows"][i];
    EXPECT_EQ(e.at("precision"), names[i]);
    EXPECT_EQ(e.at("peak_allocated_bytes").get<int64_t>(), rows[i].peak_allocated);
    EXPECT_EQ(e.at("peak_reserved_bytes").get<int64_t>(), rows[i].peak_reserved);
    EXPECT_DOUBLE_EQ(e.at("images_per_second").get<double>(), rows[i].images_per_second);
    EXPECT_DOUBLE_EQ(e.at("median_step_ms").get<double>(), rows[i].median_step_ms);
    EXPECT_DOUBLE_EQ(e.at("loss").get<double>(), rows[i].loss);
    EXPECT_DOUBLE_EQ(e.at("first_loss").get<double>(), rows[i].first_loss);
    EXPECT_DOUBLE_EQ(e.at("peak_allocated_ratio").get<double>(), rows[i].peak_allocated_ratio);
    EXPECT_DOUBLE_EQ(e.at("peak_reserved_ratio").get<double>(), rows[i].peak_reserved_ratio);
    EXPECT_DOUBLE_EQ(e.at("images_per_second_ratio").get<double>(),
                     rows[i].images_per_second_ratio);
    EXPECT_DOUBLE_EQ(e.at("loss_ratio").get<double>(), rows[i].loss_ratio);
    EXPECT_DOUBLE_EQ(e.at("loss_scale").get<double>(), rows[i].loss_scale);
  }
}

TEST(PrecisionCompare, SvgHasOneRectPerBarAndIsWellFormed) {
  const std::string svg = train::to_svg(small_options(), small_rows());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  const std::string t = trimmed(svg);
  EXPECT_EQ(t.substr(t.size() - 6), "</svg>");
  EXPECT_EQ(count(svg, "<rect"), 9u);  // 3 metrics x 3 precisions
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_NE(svg.find("peak allocated"), std::string::npos);
  EXPECT_NE(svg.find("img/s"), std::string::npos);
  EXPECT_NE(svg.find(">1.00x<"), std::string::npos);  // the f32 bars are labelled 1.00x
}

TEST(PrecisionCompare, SvgEscapesTextAndSurvivesZeroAndNonFiniteValues) {
  train::CompareOptions o = small_options();
  o.model = "a<b>&\"c'";
  std::vector<train::CompareRow> rows(2);
  rows[0] = {.precision = DType::f32,
             .peak_allocated = 100,
             .peak_reserved = 200,
             .images_per_second = 0,
             .loss = 1.0};
  rows[1] = {.precision = DType::bf16,
             .peak_allocated = 50,
             .peak_reserved = 300,
             .images_per_second = 10,
             .loss = std::nan("")};
  train::fill_ratios(rows);
  EXPECT_EQ(rows[1].peak_allocated_ratio, 0.5);
  EXPECT_EQ(rows[1].peak_reserved_ratio, 1.5);
  EXPECT_EQ(rows[1].images_per_second_ratio, 0.0);  // f32's value is 0: no ratio
  EXPECT_TRUE(std::isnan(rows[1].loss_ratio));
  const std::string svg = train::to_svg(o, rows);
  EXPECT_EQ(count(svg, "<rect"), 6u);
  EXPECT_EQ(xml_error(svg), "");
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c&apos;"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  // JSON has no NaN: a non-finite loss becomes null and the document still parses.
  nlohmann::json j = nlohmann::json::parse(train::to_json(o, rows));
  EXPECT_TRUE(j["rows"][1]["loss"].is_null());
  EXPECT_EQ(j.at("model"), o.model);
}

TEST(PrecisionCompare, TableShowsEveryPrecisionWithItsRatios) {
  std::vector<train::CompareRow> rows(3);
  rows[0] = {.precision = DType::f32,
             .peak_allocated = 4 << 20,
             .peak_reserved = 8 << 20,
             .median_step_ms = 10,
             .images_per_second = 1600,
             .loss = 2.0};
  rows[1] = {.precision = DType::f16,
             .peak_allocated = 2 << 20,
             .peak_reserved = 4 << 20,
             .median_step_ms = 5,
             .images_per_second = 3200,
             .loss = 2.1};
  rows[2] = {.precision = DType::bf16,
             .peak_allocated = 3 << 20,
             .peak_reserved = 6 << 20,
             .median_step_ms = 8,
             .images_per_second = 2000,
             .loss = 1.9};
  train::fill_ratios(rows);
  const std::string t = train::to_table(small_options(), rows);
  EXPECT_NE(t.find("4.0 MiB (1.00x)"), std::string::npos) << t;
  EXPECT_NE(t.find("2.0 MiB (0.50x)"), std::string::npos) << t;
  EXPECT_NE(t.find("6.0 MiB (0.75x)"), std::string::npos) << t;
  EXPECT_NE(t.find("3200.0 (2.00x)"), std::string::npos) << t;
  EXPECT_NE(t.find("1.9000 (0.950x)"), std::string::npos) << t;
  EXPECT_NE(t.find("bf16"), std::string::npos) << t;
}

TEST(PrecisionCompare, RefusesBadPrecisionsAndRowsWithoutF32) {
  EXPECT_THROW(train::run_precision(small_options(), DType::f64), Error);
  train::CompareOptions o = small_options();
  o.steps = 0;
  EXPECT_THROW(train::run_precision(o, DType::f32), Error);
  std::vector<train::CompareRow> rows(1);
  rows[0].precision = DType::f16;
  EXPECT_THROW(train::fill_ratios(rows), Error);
}

TEST(PrecisionCompare, GraphOptionRunsEagerlyOnTheCpuWithTheSameLosses) {
  train::CompareOptions o = small_options();
  o.warmup = 2;
  const train::CompareRow eager = train::run_precision(o, DType::bf16);
  o.graph = true;
  const train::CompareRow graphed = train::run_precision(o, DType::bf16);
  EXPECT_EQ(graphed.first_loss, eager.first_loss);
  EXPECT_EQ(graphed.loss, eager.loss);
  EXPECT_EQ(nlohmann::json::parse(train::to_json(o, {graphed})).at("graph"), true);
  EXPECT_NE(train::to_table(o, {graphed}).find("replayed from a CUDA graph"), std::string::npos);
  o.warmup = 1;  // the capture needs an eager warm-up step before it
  EXPECT_THROW(train::run_precision(o, DType::f32), Error);
}
