// Saved-activation estimate of a forward (train/saved_estimate.h).
#include "train/saved_estimate.h"

#include <cstdio>

#include "core/autocast.h"
#include "core/factory.h"
#include "core/ops.h"

namespace frugal::train {

SavedEstimate estimate_saved(nn::Module& model, const Shape& input_nhwc, DType precision,
                             int depth) {
  std::vector<Tensor> params = model.parameters();
  FRUGAL_CHECK(!params.empty(), "estimate_saved: the model has no parameters to place it");
  FRUGAL_CHECK(precision == DType::f32 || is_low_precision(precision),
               "estimate_saved: precision must be f32, f16 or bf16, got ", precision);
  const Device device = params[0].device();
  model.train();
  Tensor x = Tensor::empty(input_nhwc, {DType::f32, device});
  if (!device.is_meta()) fill_(x, 0.5);
  autograd::GradModeGuard grad(true);
  Tensor out;
  {
    AutocastGuard amp(device, is_low_precision(precision) ? precision : DType::f16,
                      precision != DType::f32);
    out = model(x);
  }
  SavedEstimate e;
  e.modules = autograd::saved_bytes_by_module({out}, depth);
  for (const auto& m : e.modules) {
    e.saved_bytes += m.saved_bytes;
    e.conv_output_bytes += m.conv_output_bytes;
  }
  return e;
}

std::string saved_table(const SavedEstimate& e) {
  constexpr double kMiB = 1024.0 * 1024.0;
  auto ratio = [](size_t a, size_t b) { return b == 0 ? 0.0 : static_cast<double>(a) / b; };
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %14s %22s %8s\n", "module", "saved MiB",
                "one per conv layer MiB", "ratio");
  s += line;
  for (const auto& m : e.modules) {
    if (m.saved_bytes == 0 && m.conv_output_bytes == 0) continue;
    std::snprintf(line, sizeof line, "%-28s %14.2f %22.2f %8.2f\n",
                  m.module.empty() ? "(top level)" : m.module.c_str(), m.saved_bytes / kMiB,
                  m.conv_output_bytes / kMiB, ratio(m.saved_bytes, m.conv_output_bytes));
    s += line;
  }
  std::snprintf(line, sizeof line, "%-28s %14.2f %22.2f %8.2f\n", "total", e.saved_bytes / kMiB,
                e.conv_output_bytes / kMiB, ratio(e.saved_bytes, e.conv_output_bytes));
  s += line;
  return s;
}

}  // namespace frugal::train
