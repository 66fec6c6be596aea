// MobileNetV2's 34 pointwise (1x1) convolutions at batch 128, 224x224, as their 19 shapes: the
// layers that fused_pointwise_probe, cudnn_fusion_probe and gemm_algo_probe time
// (triton_pointwise_probe.py keeps the same list in Python).
#pragma once

namespace probe {

constexpr int kPointwiseBatch = 128;

struct PointwiseShape {
  int hw;      // the feature map's side
  int k, n;    // input and output channels
  bool relu6;  // the input's batch norm is followed by ReLU6 (projections), or not (expansions)
  int count;   // how many of MobileNetV2's 1x1 convolutions have this shape
  long rows = long{kPointwiseBatch} * hw * hw;  // pixels of the batch: rows of the NHWC matrix
};

constexpr PointwiseShape kMobileNetV2Pointwise[] = {
    {112, 32, 16, true, 1},   {112, 16, 96, false, 1}, {56, 96, 24, true, 1},
    {56, 24, 144, false, 2},  {56, 144, 24, true, 1},  {28, 144, 32, true, 1},
    {28, 32, 192, false, 3},  {28, 192, 32, true, 2},  {14, 192, 64, true, 1},
    {14, 64, 384, false, 4},  {14, 384, 64, true, 3},  {14, 384, 96, true, 1},
    {14, 96, 576, false, 3},  {14, 576, 96, true, 2},  {7, 576, 160, true, 1},
    {7, 160, 960, false, 3},  {7, 960, 160, true, 2},  {7, 960, 320, true, 1},
    {7, 320, 1280, false, 1},
};

}  // namespace probe
