// oneDNN matmul primitives built once per shape and kept (Note [oneDNN GEMMs]).
#include "kernels/cpu/onednn_gemm.h"

#if defined(FRUGAL_WITH_ONEDNN)

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace frugal::kernels::cpu {
namespace {

bool enabled_by_environment() {
  static const bool enabled = [] {
    const char* v = std::getenv("FRUGAL_ONEDNN");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

std::optional<dnnl::memory::data_type> onednn_type(DType t) {
  switch (t) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::f16:
      return dnnl::memory::data_type::f16;
    default:
      return std::nullopt;
  }
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// rows x cols with element (i, j) at i * ld + j, or at j * ld + i when transposed.
dnnl::memory::desc matrix_desc(int64_t rows, int64_t cols, dnnl::memory::data_type t, int64_t ld,
                               bool transposed) {
  return dnnl::memory::desc({rows, cols}, t,
                            transposed ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
}

// A built primitive with its descriptor; primitive == nullopt when oneDNN declined.
struct Built {
  std::optional<dnnl::matmul> primitive;
  dnnl::matmul::primitive_desc pd;
};

using Key = std::array<int64_t, 13>;  // sizes, lds, dtypes, transposes, bias, accumulate

Built build(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
            DType c_dtype, int64_t ldc, bool bias, bool accumulate) {
  auto at = onednn_type(a.dtype), bt = onednn_type(b.dtype), ct = onednn_type(c_dtype);
  if (!at || !bt || !ct) return {};
  try {
    dnnl::matmul::desc desc =
        bias ? dnnl::matmul::desc(matrix_desc(m, k, *at, a.ld, a.transposed),
                                  matrix_desc(k, n, *bt, b.ld, b.transposed),
                                  dnnl::memory::desc({1, n}, dnnl::memory::data_type::f32,
                                                     dnnl::memory::dims{n, 1}),
                                  matrix_desc(m, n, *ct, ldc, false))
             : dnnl::matmul::desc(matrix_desc(m, k, *at, a.ld, a.transposed),
                                  matrix_desc(k, n, *bt, b.ld, b.transposed),
                                  matrix_desc(m, n, *ct, ldc, false));
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    // The reference implementation is slower than Eigen by far: decline it.
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return {};
    return {dnnl::matmul(pd), pd};
  } catch (const dnnl::error&) {
    return {};  // no implementation for these dtypes or layouts here
  }
}

// Shapes repeat every step, so each is built once; a model has a few dozen.
const Built& built_for(int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
                       DType c_dtype, int64_t ldc, bool bias, bool accumulate) {
  const auto dt = [](DType t) { return static_cast<int64_t>(t); };
  const Key key{m,           n,           k,           ldc,          a.ld,         b.ld,
                dt(a.dtype), dt(b.dtype), dt(c_dtype), a.transposed, b.transposed, bias,
                accumulate};
  static std::mutex mutex;
  static std::map<Key, Built> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache.emplace(key, build(m, n, k, a, b, c_dtype, ldc, bias, accumulate)).first;
  }
  return it->second;  // std::map never moves its elements
}

}  // namespace

bool onednn_gemm(const Context& ctx, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
                 const GemmOperand& b, void* c, DType c_dtype, int64_t ldc, const float* bias,
                 bool accumulate) {
  if (!enabled_by_environment() || m <= 0 || n <= 0 || k <= 0) return false;
  const Built& built = built_for(m, n, k, a, b, c_dtype, ldc, bias != nullptr, accumulate);
  if (!built.primitive) return false;
  const dnnl::engine& engine = cpu_engine();
  const dnnl::matmul::primitive_desc& pd = built.pd;
  memory::DataPtr scratch = ctx.workspace(pd.scratchpad_desc().get_size());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(pd.src_desc(), engine, const_cast<void*>(a.data))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(pd.weights_desc(), engine, const_cast<void*>(b.data))},
      {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), engine, c)},
      {DNNL_ARG_SCRATCHPAD, dnnl::memory(pd.scratchpad_desc(), engine, scratch.get())}};
  if (bias != nullptr) {
    args.emplace(DNNL_ARG_BIAS, dnnl::memory(pd.bias_desc(), engine, const_cast<float*>(bias)));
  }
  thread_local dnnl::stream stream(engine);  // one per calling thread, not one per call
  built.primitive->execute(stream, args);
  stream.wait();
  return true;
}

}  // namespace frugal::kernels::cpu

#else  // built without oneDNN: every caller keeps its Eigen path

namespace frugal::kernels::cpu {

bool onednn_gemm(const Context&, int64_t, int64_t, int64_t, const GemmOperand&, const GemmOperand&,
                 void*, DType, int64_t, const float*, bool) {
  return false;
}

}  // namespace frugal::kernels::cpu

#endif
