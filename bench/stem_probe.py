"""How fast cuDNN (through PyTorch) runs ResNet's 7x7 stride-2 stem in f16 and bf16, as it is
and rewritten: the input padded to 4 or 8 channels, and as the 4x4 stride-1 convolution over 16
channels of 2x2 blocks that frugal's stems become (Note [Stride-2 stems as stride-1
convolutions] in kernels/space_to_depth.h). Forward and weight gradient, channels_last,
cudnn.benchmark, CUDA events over 30 launches after 5 (bench/RESULTS.md, session 29).

    python3 bench/stem_probe.py [--batch 128]
"""
import argparse

import torch


def per_launch_ms(fn, reps=30):
    for _ in range(5):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


def time_conv(dtype, n, c, hw, kernel, stride, pad):
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.randn(64, c, kernel, kernel, device="cuda", dtype=dtype).to(
        memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
    dy = torch.randn_like(y)
    forward = per_launch_ms(lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad))
    weight_grad = per_launch_ms(lambda: torch.ops.aten.convolution_backward(
        dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1,
        [False, True, False]))
    return forward, weight_grad


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=128)
    n = parser.parse_args().batch
    torch.backends.cudnn.benchmark = True
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, batch {n}")
    for dtype in (torch.bfloat16, torch.float16):
        for c in (3, 4, 8):
            f, g = time_conv(dtype, n, c, 224, 7, 2, 3)
            print(f"{dtype} 7x7 stride 2, {c} channels: forward {f:.3f} ms, "
                  f"weight grad {g:.3f} ms")
        f, g = time_conv(dtype, n, 16, 115, 4, 1, 0)
        print(f"{dtype} 4x4 stride 1 over 16 channels of 115x115 (space to depth): "
              f"forward {f:.3f} ms, weight grad {g:.3f} ms")


if __name__ == "__main__":
    main()
