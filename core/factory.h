// Tensor factories and the seeded random generator.
//
//   Generator gen(42);
//   Tensor x = randn({4, 8}, gen);                        // f32 on the CPU
//   Tensor y = zeros({4, 8}, {.dtype = DType::bf16, .device = Device::cuda()});
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace frugal {

// Counter-based generator (kernels/random.h): a draw of n values uses offsets
// [offset, offset + n) and advances offset, so CPU and CUDA draws agree value for value.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves n draws and returns the first offset. Throws while this thread captures a CUDA
  // graph: the offset would be frozen into the graph (Note [Random draws in captured graphs]).
  uint64_t take(uint64_t n);

  // A draw of n values for a kernel that reads its offset as offset + *offset_base when
  // offset_base is not null (dropout). Outside a capture offset_base is null and offset absolute.
  struct Draw {
    uint64_t seed = 0;
    uint64_t offset = 0;
    const uint64_t* offset_base = nullptr;
  };
  Draw draw(uint64_t n);

  // Note [Random draws in captured graphs]
  // A captured graph replays its kernels with the arguments they had during capture, so a draw
  // offset passed by value would give every replay the same dropout mask. Between these two
  // calls draw() hands out offsets relative to the capture's start and the device counter
  // `offset_base` (which the caller sets to offset() before capture and advances by the
  // returned count at the end of every replay, inside the graph); take() throws. PyTorch's
  // CUDA generator does the same with its philox offset.
  void begin_graph_capture(const uint64_t* offset_base);
  uint64_t end_graph_capture();  // draws reserved since begin_graph_capture
  bool capturing_graph() const { return graph_base_ != nullptr; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  const uint64_t* graph_base_ = nullptr;
  uint64_t graph_start_ = 0;
};

// The process-wide generator used when none is given; manual_seed resets it.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Puts a generator's seed and offset back as they were when the guard was made: for work that
// draws (building a model, a dry run with dropout) but must leave the caller's stream alone.
class GeneratorStateGuard {
 public:
  explicit GeneratorStateGuard(Generator& gen = default_generator())
      : gen_(gen), seed_(gen.seed()), offset_(gen.offset()) {}
  ~GeneratorStateGuard() {
    gen_.manual_seed(seed_);
    gen_.set_offset(offset_);
  }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  Generator& gen_;
  uint64_t seed_, offset_;
};

Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Note [Uniform draws below hi]
// rand draws from [lo, hi), finite bounds with lo <= hi. lo + (hi - lo) u with u < 1 can still
// round to hi in the tensor's dtype (in f16 between 1 and 2 about one draw in 2,048); such a
// draw becomes lo, as PyTorch's uniform_ does. 16-bit tensors are checked after each rounding,
// f32 then theirs, on the CPU and on CUDA alike, so both give the same values.
Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts = {}, double lo = 0,
            double hi = 1);
Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts = {}, double mean = 0,
             double stddev = 1);
Tensor arange(int64_t n, TensorOptions opts = {});
// Copies `data` (of `dtype`, host memory) into a new tensor on opts.device. Unlike PyTorch's
// from_blob this copies: every tensor byte must come from a frugal allocator.
Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions opts = {});
// Values converted to opts.dtype (any floating dtype, or i64 for labels).
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opts = {});

}  // namespace frugal
