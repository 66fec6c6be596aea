// Line charts as stand-alone SVG text, for the memory monitor's pictures (no plotting library:
// a few polylines, axes, shaded bands and a legend are all it needs).
//
//   train::Chart c{.title = "memory over one step", .x_label = "ms", .y_label = "MiB"};
//   c.series.push_back({"allocated", "#1f77b4", {{0, 10}, {1.5, 42}}});
//   c.bands.push_back({0, 1.5, "forward", "#2ca02c"});
//   std::string svg = train::render_svg(c);
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace frugal::train {

struct ChartSeries {
  std::string name;
  std::string color;                              // any SVG colour
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool steps = false;  // draw as a step function (the value holds until the next point)
};

struct ChartBand {  // a shaded range of x with a label at its top
  double x0 = 0, x1 = 0;
  std::string label;
  std::string color;
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  std::vector<ChartBand> bands;
  int width = 900, height = 380;
};

// The chart as an SVG document; axes span the data (y from 0), with five ticks each.
std::string render_svg(const Chart& chart);

// `s` with & < > " ' written as XML entities, for text and attributes of an SVG.
std::string xml_escape(const std::string& s);

}  // namespace frugal::train
