#include "train/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace frugal::train {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 100 || v == std::floor(v) ? "%.0f" : "%.2g", v);
  return buf;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_svg(const Chart& chart) {
  double x_min = std::numeric_limits<double>::max(), x_max = std::numeric_limits<double>::lowest();
  double y_max = 0;
  for (const ChartSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      x_min = std::min(x_min, x), x_max = std::max(x_max, x), y_max = std::max(y_max, y);
    }
  }
  for (const ChartBand& b : chart.bands)
    x_min = std::min(x_min, b.x0), x_max = std::max(x_max, b.x1);
  if (x_min > x_max) x_min = 0, x_max = 1;
  if (x_max == x_min) x_max = x_min + 1;
  if (y_max <= 0) y_max = 1;
  y_max *= 1.08;  // head room for the band labels

  const double left = 70, right = 170, top = 40, bottom = 50;
  const double w = chart.width - left - right, h = chart.height - top - bottom;
  auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * w; };
  auto py = [&](double y) { return top + h - y / y_max * h; };

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(chart.width) + "\" height=\"" + std::to_string(chart.height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(left) + "\" y=\"22\" font-size=\"15\">" + xml_escape(chart.title) +
         "</text>\n";
  for (const ChartBand& b : chart.bands) {
    svg += "<rect x=\"" + num(px(b.x0)) + "\" y=\"" + num(top) + "\" width=\"" +
           num(std::max(px(b.x1) - px(b.x0), 0.5)) + "\" height=\"" + num(h) + "\" fill=\"" +
           b.color + "\" fill-opacity=\"0.12\"><title>" + xml_escape(b.label) + "</title></rect>\n";
    if (px(b.x1) - px(b.x0) > 40) {
      svg += "<text x=\"" + num(px(b.x0) + 4) + "\" y=\"" + num(top + 14) + "\" fill=\"" + b.color +
             "\">" + xml_escape(b.label) + "</text>\n";
    }
  }
  for (int i = 0; i <= 4; ++i) {  // ticks and grid
    const double yv = y_max / 1.08 * i / 4, xv = x_min + (x_max - x_min) * i / 4;
    svg += "<line x1=\"" + num(left) + "\" x2=\"" + num(left + w) + "\" y1=\"" + num(py(yv)) +
           "\" y2=\"" + num(py(yv)) + "\" stroke=\"#ddd\"/>\n";
    svg += "<text x=\"" + num(left - 6) + "\" y=\"" + num(py(yv) + 4) + "\" text-anchor=\"end\">" +
           tick_label(yv) + "</text>\n";
    svg += "<text x=\"" + num(px(xv)) + "\" y=\"" + num(top + h + 16) +
           "\" text-anchor=\"middle\">" + tick_label(xv) + "</text>\n";
  }
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(w) + "\" height=\"" +
         num(h) + "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text x=\"" + num(left + w / 2) + "\" y=\"" + num(chart.height - 12) +
         "\" text-anchor=\"middle\">" + xml_escape(chart.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16 " + num(top + h / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + xml_escape(chart.y_label) + "</text>\n";
  int legend = 0;
  for (const ChartSeries& s : chart.series) {
    if (s.points.empty()) continue;
    std::string pts;
    for (size_t i = 0; i < s.points.size(); ++i) {
      const auto& [x, y] = s.points[i];
      if (s.steps && i > 0) pts += num(px(x)) + "," + num(py(s.points[i - 1].second)) + " ";
      pts += num(px(x)) + "," + num(py(y)) + " ";
    }
    svg += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.5\" points=\"" +
           pts + "\"><title>" + xml_escape(s.name) + "</title></polyline>\n";
    const double ly = top + 10 + 18 * legend++;
    svg += "<line x1=\"" + num(left + w + 12) + "\" x2=\"" + num(left + w + 32) + "\" y1=\"" +
           num(ly) + "\" y2=\"" + num(ly) + "\" stroke=\"" + s.color + "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + num(left + w + 38) + "\" y=\"" + num(ly + 4) + "\">" +
           xml_escape(s.name) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace frugal::train
