// The three renderings of a precision comparison: a text table, JSON (nlohmann) and a
// self-contained SVG bar chart written by hand (no plotting dependency).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "train/precision_compare.h"
#include "train/svg_chart.h"

namespace frugal::train {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

std::string input_str(const CompareOptions& o) {
  return std::to_string(o.channels) + "x" + std::to_string(o.height) + "x" +
         std::to_string(o.width);
}

// Bar colours by precision (f32, f16, bf16), colour-blind safe (Tableau 10).
const char* colour(DType p) {
  return p == DType::f32 ? "#4e79a7" : p == DType::f16 ? "#f28e2b" : "#59a14f";
}

std::string mib(int64_t bytes) { return format("%.1f MiB", static_cast<double>(bytes) / kMiB); }

}  // namespace

std::string to_table(const CompareOptions& o, const std::vector<CompareRow>& rows) {
  std::string s = format(
      "%s (width %.2f), batch %lld, input %s, %lld classes, %s: %lld warm-up + "
      "%lld timed steps%s%s, SGD lr %g momentum %g, seed %llu\n",
      o.model.c_str(), o.width_multiplier, static_cast<long long>(o.batch), input_str(o).c_str(),
      static_cast<long long>(o.classes), o.device.str().c_str(), static_cast<long long>(o.warmup),
      static_cast<long long>(o.steps), o.graph ? " (replayed from a CUDA graph)" : "",
      o.checkpoint.mode == models::CheckpointPolicy::Mode::none
          ? ""
          : (", checkpoint " + o.checkpoint.str()).c_str(),
      o.lr, o.momentum, static_cast<unsigned long long>(o.seed));
  s += format("%-9s %-24s %-24s %-22s %9s  %-20s %s\n", "precision", "peak allocated",
              "peak reserved", "img/s", "step ms", "last loss", "loss scale");
  for (const CompareRow& r : rows) {
    s += format("%-9s %-24s %-24s %-22s %9.2f  %-20s %g\n", dtype_name(r.precision),
                format("%s (%.2fx)", mib(r.peak_allocated).c_str(), r.peak_allocated_ratio).c_str(),
                format("%s (%.2fx)", mib(r.peak_reserved).c_str(), r.peak_reserved_ratio).c_str(),
                format("%.1f (%.2fx)", r.images_per_second, r.images_per_second_ratio).c_str(),
                r.median_step_ms, format("%.4f (%.3fx)", r.loss, r.loss_ratio).c_str(),
                r.loss_scale);
  }
  s += "ratios are to f32; peaks from right after the model is built: parameters, gradients, "
       "momentum, batch, activations\n";
  return s;
}

std::string to_json(const CompareOptions& o, const std::vector<CompareRow>& rows) {
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["width_multiplier"] = o.width_multiplier;
  j["batch"] = o.batch;
  j["input"] = input_str(o);
  j["layout"] = "NHWC";
  j["classes"] = o.classes;
  j["device"] = o.device.str();
  j["warmup"] = o.warmup;
  j["steps"] = o.steps;
  j["graph"] = o.graph;
  j["seed"] = o.seed;
  j["optimizer"] = format("SGD lr %g momentum %g", o.lr, o.momentum);
  j["memory_measured"] =
      "allocator peaks from right after the model is built and moved to the device, each "
      "precision from an emptied cache: parameters, batch, gradients, momentum, autocast copies, "
      "activations";
  j["timer"] = o.device.is_cuda() ? "cuda events on the compute stream, no host wait between steps"
                                  : "steady clock around each step";
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const CompareRow& r : rows) {
    nlohmann::ordered_json e;
    e["precision"] = dtype_name(r.precision);
    e["peak_allocated_bytes"] = r.peak_allocated;
    e["peak_reserved_bytes"] = r.peak_reserved;
    e["median_step_ms"] = r.median_step_ms;
    e["images_per_second"] = r.images_per_second;
    e["first_loss"] = r.first_loss;  // non-finite values become null (JSON has no NaN)
    e["loss"] = r.loss;
    e["loss_scale"] = r.loss_scale;
    e["peak_allocated_ratio"] = r.peak_allocated_ratio;
    e["peak_reserved_ratio"] = r.peak_reserved_ratio;
    e["images_per_second_ratio"] = r.images_per_second_ratio;
    e["loss_ratio"] = r.loss_ratio;
    arr.push_back(std::move(e));
  }
  j["rows"] = std::move(arr);
  return j.dump(2) + "\n";
}

std::string to_svg(const CompareOptions& o, const std::vector<CompareRow>& rows) {
  struct Metric {
    const char* name;
    double (*ratio)(const CompareRow&);
    std::string (*value)(const CompareRow&);
  };
  const Metric metrics[] = {
      {"peak allocated", [](const CompareRow& r) { return r.peak_allocated_ratio; },
       [](const CompareRow& r) { return mib(r.peak_allocated); }},
      {"peak reserved", [](const CompareRow& r) { return r.peak_reserved_ratio; },
       [](const CompareRow& r) { return mib(r.peak_reserved); }},
      {"img/s", [](const CompareRow& r) { return r.images_per_second_ratio; },
       [](const CompareRow& r) { return format("%.1f img/s", r.images_per_second); }},
  };
  // A bar's value, with non-finite ratios drawn as 0 so the chart stays valid.
  auto safe = [](double v) { return std::isfinite(v) && v > 0 ? v : 0.0; };
  double top = 1.0;
  for (const Metric& m : metrics)
    for (const CompareRow& r : rows) top = std::max(top, safe(m.ratio(r)));
  top *= 1.2;  // headroom for the labels above the tallest bar

  constexpr double kW = 720, kH = 380, kLeft = 50, kRight = 20, kTop = 60, kBottom = 70;
  const double plot_w = kW - kLeft - kRight, plot_h = kH - kTop - kBottom, base_y = kTop + plot_h;
  const double group_w = plot_w / 3.0;
  const double bar_w = group_w / static_cast<double>(rows.size() + 1);
  auto y_of = [&](double ratio) { return base_y - plot_h * ratio / top; };

  std::string s = format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
      kW, kH, kW, kH);
  s += format("<text x=\"%.1f\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">", kW / 2) +
       xml_escape(o.model + ", batch " + std::to_string(o.batch) + ", input " + input_str(o) +
                  " on " + o.device.str() + ": relative to f32 (= 1.0)") +
       "</text>\n";
  s += format("<text x=\"%.1f\" y=\"40\" font-size=\"11\" text-anchor=\"middle\" fill=\"#555\">",
              kW / 2) +
       xml_escape(
           "peaks include parameters, gradients, momentum and activations; img/s from "
           "the median of " +
           std::to_string(o.steps) + " timed steps") +
       "</text>\n";
  // The f32 reference line and the axis.
  s += format(
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
      "stroke-dasharray=\"4 3\"/>\n",
      kLeft, y_of(1.0), kW - kRight, y_of(1.0));
  s += format("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">1.0</text>\n",
              kLeft - 4, y_of(1.0) + 4);
  s += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", kLeft,
              base_y, kW - kRight, base_y);
  for (size_t g = 0; g < 3; ++g) {
    const Metric& m = metrics[g];
    const double gx = kLeft + group_w * static_cast<double>(g) + bar_w / 2;
    for (size_t i = 0; i < rows.size(); ++i) {
      const CompareRow& r = rows[i];
      const double ratio = safe(m.ratio(r));
      const double x = gx + bar_w * static_cast<double>(i), y = y_of(ratio);
      const double cx = x + bar_w * 0.45;
      s += format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">", x, y,
                  bar_w * 0.9, base_y - y, colour(r.precision)) +
           "<title>" +
           xml_escape(std::string(dtype_name(r.precision)) + " " + m.name + ": " + m.value(r)) +
           "</title></rect>\n";
      s += format(
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">%.2fx"
          "</text>\n",
          cx, y - 18, ratio);
      s += format(
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" "
               "fill=\"#555\">",
               cx, y - 6) +
           xml_escape(m.value(r)) + "</text>\n";
      s += format("<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                  cx, base_y + 14, dtype_name(r.precision));
    }
    s += format("<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"middle\">",
                kLeft + group_w * (static_cast<double>(g) + 0.5), base_y + 38) +
         xml_escape(m.name) + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace frugal::train
