#include "dist/process_group.h"

#include "base/error.h"
#include "core/factory.h"
#include "core/ops.h"

namespace frugal::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

namespace {
struct DoneWork final : Work {
  void wait() override {}
};
}  // namespace

std::unique_ptr<Work> ProcessGroup::all_reduce_async(Tensor& t, ReduceOp op) {
  all_reduce(t, op);
  return std::make_unique<DoneWork>();
}

void check_collective_tensor(const ProcessGroup& group, const char* op, const Tensor& t) {
  FRUGAL_CHECK(t.defined(), op, ": undefined tensor");
  FRUGAL_CHECK(t.device() == group.device(), op, ": the tensor is on ", t.device(), ", the ",
               group.backend(), " group's tensors must be on ", group.device());
  FRUGAL_CHECK(t.dtype() != DType::u8 || std::string(op) == "broadcast", op,
               ": cannot reduce u8 tensors");
}

std::vector<double> all_reduce_values(ProcessGroup& group, std::vector<double> values,
                                      ReduceOp op) {
  if (values.empty() || group.size() == 1) return values;
  // f64 where the device has it (the CPU), f32 on GPUs: metrics and counts below 2^24.
  const DType dtype = group.device().is_cpu() ? DType::f64 : DType::f32;
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())},
                         {.dtype = dtype, .device = group.device()});
  group.all_reduce(t, op);
  return t.to_vector();
}

}  // namespace frugal::dist
