#!/usr/bin/env python3
"""Can a compiler-generated fused kernel do what frugal's hand-written ones could not?

bench/fused_pointwise_probe.cu (session 33, bench/RESULTS.md) fused MobileNetV2's 1x1
convolutions with the previous batch norm (applied to x as it loads) and their own statistics
(summed as the output is stored) in WMMA kernels: right, but 0.72x (forward) and 0.61x (backward)
of today's passes around cuBLAS. On the narrow layers they streamed at a third of the HBM rate;
on the wide ones their main loop was far slower than cuBLAS's.
bench/cudnn_fusion_probe.cu found cuDNN's fused engine fast but blind to ReLU6. Triton generates
Hopper matrix code (wgmma) from a tile program, and the tile of x can be normalized in registers
before its product: the same fusion with a main loop from a compiler. This probe times it at the
same 19 shapes and 34 layers, in the same two directions, against the same bound:

- forward: z = f(x) w^T stored in f16, with the sums of z and z^2 per output channel;
- backward from g = dL/dz: dw = g^T f(x) (f32, rows split over programs, added atomically) and
  da = g w stored in f16, with the previous batch norm's sums of dy and dy * x per input channel,
  where dy = da where ReLU6 passes (everywhere without an activation).

f(x) = clamp(x * scale + shift, 0, 6), or x * scale + shift where MobileNetV2 has no activation.
Beside each: cuBLAS's GEMMs alone (torch.matmul) and PyTorch eager's passes (its own kernels for
the normalize, the GEMMs and the sums), and the bound: the fewest bytes of one fused pass at
4.8 TB/s (fused_pointwise_probe's). Each configuration of a short list is timed and the fastest
kept; times are medians of 7 x 10 replays of a CUDA graph that rotates among enough input sets
to keep the working set above the L2. Results are checked against float64 references; any wrong
one (marked WRONG in its line) makes the exit status 1.

  python3 bench/triton_pointwise_probe.py [--directions forward,backward] [--seconds 480]
"""
import argparse
import math
import sys
import time

import torch
import triton
import triton.language as tl

BATCH = 128
PEAK_BYTES_PER_US = 4.8e6  # 4.8 TB/s
# (H = W, k input channels, n output channels, ReLU6 before the convolution, layers of the shape)
SHAPES = [
    (112, 32, 16, True, 1), (112, 16, 96, False, 1), (56, 96, 24, True, 1),
    (56, 24, 144, False, 2), (56, 144, 24, True, 1), (28, 144, 32, True, 1),
    (28, 32, 192, False, 3), (28, 192, 32, True, 2), (14, 192, 64, True, 1),
    (14, 64, 384, False, 4), (14, 384, 64, True, 3), (14, 384, 96, True, 1),
    (14, 96, 576, False, 3), (14, 576, 96, True, 2), (7, 576, 160, True, 1),
    (7, 160, 960, False, 3), (7, 960, 160, True, 2), (7, 960, 320, True, 1),
    (7, 320, 1280, False, 1),
]
TOLERANCE = {"out": 2e-3, "sum": 1e-4, "dw": 1e-3}  # relative to the largest reference value


@triton.jit
def _activate(x, scale, shift, RELU6: tl.constexpr):
    a = x * scale + shift
    if RELU6:
        a = tl.minimum(tl.maximum(a, 0.0), 6.0)
    return a


@triton.jit
def forward_kernel(x_ptr, w_ptr, scale_ptr, shift_ptr, z_ptr, sum_ptr, sq_ptr, R, K, N,
                   RELU6: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """z[R, N] = f(x[R, K]) w[N, K]^T in f16; sum_ptr/sq_ptr[N] += the column sums of z and z^2
    (as stored). Programs along axis 0 stride over the row tiles and add their sums once, so the
    atomics do not pile onto the few addresses of the sums."""
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    first = tl.zeros((BN,), dtype=tl.float32)
    second = tl.zeros((BN,), dtype=tl.float32)
    for tile in range(tl.program_id(0), tl.cdiv(R, BM), tl.num_programs(0)):
        rows = tile * BM + tl.arange(0, BM)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            x = tl.load(x_ptr + rows[:, None] * K + ks[None, :],
                        mask=(rows[:, None] < R) & (ks[None, :] < K), other=0.0)
            scale = tl.load(scale_ptr + ks, mask=ks < K, other=0.0)
            shift = tl.load(shift_ptr + ks, mask=ks < K, other=0.0)
            a = _activate(x.to(tl.float32), scale[None, :], shift[None, :], RELU6).to(tl.float16)
            # w^T's tile [BK, BN]; depths past K are zeros, so a's values there do not count.
            wt = tl.load(w_ptr + cols[None, :] * K + ks[:, None],
                         mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, wt, acc)
        z = acc.to(tl.float16)
        inside = (rows[:, None] < R) & (cols[None, :] < N)
        tl.store(z_ptr + rows[:, None] * N + cols[None, :], z, mask=inside)
        zf = tl.where(inside, z.to(tl.float32), 0.0)
        first += tl.sum(zf, axis=0)
        second += tl.sum(zf * zf, axis=0)
    tl.atomic_add(sum_ptr + cols, first, mask=cols < N)
    tl.atomic_add(sq_ptr + cols, second, mask=cols < N)


@triton.jit
def input_gradient_kernel(g_ptr, w_ptr, x_ptr, scale_ptr, shift_ptr, da_ptr, sum_ptr, sq_ptr,
                          R, K, N, RELU6: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                          BN: tl.constexpr):
    """da[R, K] = g[R, N] w[N, K] in f16; sum_ptr/sq_ptr[K] += the column sums of dy and dy * x,
    dy = da (as stored) where the activation passes. Row tiles strided as in forward_kernel."""
    cols = tl.program_id(1) * BK + tl.arange(0, BK)  # input channels, da's columns
    scale = tl.load(scale_ptr + cols, mask=cols < K, other=0.0)
    shift = tl.load(shift_ptr + cols, mask=cols < K, other=0.0)
    first = tl.zeros((BK,), dtype=tl.float32)
    second = tl.zeros((BK,), dtype=tl.float32)
    for tile in range(tl.program_id(0), tl.cdiv(R, BM), tl.num_programs(0)):
        rows = tile * BM + tl.arange(0, BM)
        acc = tl.zeros((BM, BK), dtype=tl.float32)
        for n0 in range(0, N, BN):
            ns = n0 + tl.arange(0, BN)
            g = tl.load(g_ptr + rows[:, None] * N + ns[None, :],
                        mask=(rows[:, None] < R) & (ns[None, :] < N), other=0.0)
            w = tl.load(w_ptr + ns[:, None] * K + cols[None, :],
                        mask=(ns[:, None] < N) & (cols[None, :] < K), other=0.0)
            acc = tl.dot(g, w, acc)
        da = acc.to(tl.float16)
        inside = (rows[:, None] < R) & (cols[None, :] < K)
        tl.store(da_ptr + rows[:, None] * K + cols[None, :], da, mask=inside)
        x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=inside,
                    other=0.0).to(tl.float32)
        dy = tl.where(inside, da.to(tl.float32), 0.0)
        if RELU6:
            v = x * scale[None, :] + shift[None, :]
            dy = tl.where((v > 0.0) & (v < 6.0), dy, 0.0)
        first += tl.sum(dy, axis=0)
        second += tl.sum(dy * x, axis=0)
    tl.atomic_add(sum_ptr + cols, first, mask=cols < K)
    tl.atomic_add(sq_ptr + cols, second, mask=cols < K)


@triton.jit
def weight_gradient_kernel(g_ptr, x_ptr, scale_ptr, shift_ptr, dw_ptr, R, K, N, rows_per_split,
                           RELU6: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                           BR: tl.constexpr):
    """dw[N, K] += g[rows, N]^T f(x[rows, K]) over this program's split of the rows (axis 2)."""
    ns = tl.program_id(0) * BN + tl.arange(0, BN)
    ks = tl.program_id(1) * BK + tl.arange(0, BK)
    first = tl.program_id(2) * rows_per_split
    last = tl.minimum(first + rows_per_split, R)
    scale = tl.load(scale_ptr + ks, mask=ks < K, other=0.0)
    shift = tl.load(shift_ptr + ks, mask=ks < K, other=0.0)
    acc = tl.zeros((BN, BK), dtype=tl.float32)
    for r0 in range(first, last, BR):
        rows = r0 + tl.arange(0, BR)
        live = rows < last
        g = tl.load(g_ptr + rows[:, None] * N + ns[None, :],
                    mask=live[:, None] & (ns[None, :] < N), other=0.0)
        x = tl.load(x_ptr + rows[:, None] * K + ks[None, :],
                    mask=live[:, None] & (ks[None, :] < K), other=0.0)
        a = _activate(x.to(tl.float32), scale[None, :], shift[None, :], RELU6)
        a = tl.where(live[:, None], a, 0.0).to(tl.float16)  # rows past the split add nothing
        acc = tl.dot(tl.trans(g), a, acc)
    tl.atomic_add(dw_ptr + ns[:, None] * K + ks[None, :], acc,
                  mask=(ns[:, None] < N) & (ks[None, :] < K))


def row_programs(rows, bm, column_tiles):
    """A grid of about eight programs per multiprocessor (132 on the H200), each striding over
    the row tiles of its column tile."""
    return (max(1, min(triton.cdiv(rows, bm), 8 * 132 // column_tiles)), column_tiles)


def pow2_between(v, lo, hi):
    return max(lo, min(hi, triton.next_power_of_2(v)))


class Layer:
    """One shape's weights, scale and shift, and its input sets (each with its outputs)."""

    def __init__(self, shape, gen):
        self.hw, self.k, self.n, self.relu6, self.count = shape
        self.rows = BATCH * self.hw * self.hw
        dev = "cuda"
        k, n, rows = self.k, self.n, self.rows
        # Values of x * scale + shift spread over about [-10, 12]: both of ReLU6's edges bite.
        self.w = ((torch.rand(n, k, generator=gen, device=dev) * 2 - 1) / math.sqrt(k)).half()
        self.scale = torch.rand(k, generator=gen, device=dev) * 1.5 + 0.5
        self.shift = torch.rand(k, generator=gen, device=dev) * 6 - 2
        self.shift[self.shift.abs() < 0.01] = 0.5
        set_bytes = 2 * rows * (2 * k + 2 * n)
        self.sets = []
        for _ in range(max(1, min(8, math.ceil(100e6 / set_bytes)))):
            x = ((torch.rand(rows, k, generator=gen, device=dev) * 2 - 1) * 4).half()
            # No x * scale + shift within 1e-3 of ReLU6's edges (there x becomes 0, and the
            # shift is kept off 0): a fused multiply-add on one side and not the other could put
            # such a value on either side, and one element's dy in or out of a sum whose terms
            # cancel reads as an error far above f32's.
            v = x.float() * self.scale + self.shift
            x[(v.abs() < 1e-3) | ((v - 6).abs() < 1e-3)] = 0
            g = (torch.rand(rows, n, generator=gen, device=dev) * 2 - 1).half()
            self.sets.append({
                "x": x, "g": g,
                "z": torch.empty(rows, n, device=dev, dtype=torch.half),
                "da": torch.empty(rows, k, device=dev, dtype=torch.half),
                "dw": torch.empty(n, k, device=dev, dtype=torch.float32),
                "sums": torch.empty(2, max(k, n), device=dev, dtype=torch.float32),
            })

    def bound_us(self, direction):
        """fused_pointwise_probe's bound: forward reads x and writes z; backward reads g and x
        once and writes da; both read the weights (f16) once."""
        per_row = self.k + self.n if direction == "forward" else self.n + 2 * self.k
        return 2 * (self.rows * per_row + self.k * self.n) / PEAK_BYTES_PER_US

    def activate(self, x):
        a = x.float() * self.scale + self.shift
        return a.clamp(0.0, 6.0) if self.relu6 else a


# ---- the three forms of each direction ---------------------------------------------------------

def forward_fused(l, s, cfg):
    bm, bn, bk, warps, stages = cfg
    s["sums"].zero_()
    grid = row_programs(l.rows, bm, triton.cdiv(l.n, bn))
    forward_kernel[grid](s["x"], l.w, l.scale, l.shift, s["z"], s["sums"][0], s["sums"][1],
                         l.rows, l.k, l.n, RELU6=l.relu6, BM=bm, BN=bn, BK=bk,
                         num_warps=warps, num_stages=stages)


def forward_eager(l, s):
    a = l.activate(s["x"]).half()
    torch.matmul(a, l.w.t(), out=s["z"])
    z = s["z"].float()
    torch.sum(z, 0, out=s["sums"][0, :l.n])
    torch.sum(z * z, 0, out=s["sums"][1, :l.n])


def forward_gemm(l, s):
    torch.matmul(s["x"], l.w.t(), out=s["z"])


def backward_fused(l, s, cfg):
    (bm, bk_in, bn_in, warps, stages), (bn, bk, br, splits, warps_w, stages_w) = cfg
    s["sums"].zero_()
    s["dw"].zero_()
    rows_per_split = triton.cdiv(triton.cdiv(l.rows, splits), br) * br
    grid_w = (triton.cdiv(l.n, bn), triton.cdiv(l.k, bk), triton.cdiv(l.rows, rows_per_split))
    weight_gradient_kernel[grid_w](s["g"], s["x"], l.scale, l.shift, s["dw"], l.rows, l.k, l.n,
                                   rows_per_split, RELU6=l.relu6, BN=bn, BK=bk, BR=br,
                                   num_warps=warps_w, num_stages=stages_w)
    grid_d = row_programs(l.rows, bm, triton.cdiv(l.k, bk_in))
    input_gradient_kernel[grid_d](s["g"], l.w, s["x"], l.scale, l.shift, s["da"], s["sums"][0],
                                  s["sums"][1], l.rows, l.k, l.n, RELU6=l.relu6, BM=bm, BK=bk_in,
                                  BN=bn_in, num_warps=warps, num_stages=stages)


def backward_eager(l, s):
    x = s["x"].float()
    a = l.activate(s["x"]).half()
    s["dw"].copy_(s["g"].t() @ a)  # cuBLAS writes f16 here; the copy is dw's f32
    torch.matmul(s["g"], l.w, out=s["da"])
    dy = s["da"].float()
    if l.relu6:
        v = x * l.scale + l.shift
        dy = dy * ((v > 0) & (v < 6))
    torch.sum(dy, 0, out=s["sums"][0, :l.k])
    torch.sum(dy * x, 0, out=s["sums"][1, :l.k])


def backward_gemm(l, s):
    s["dw"].copy_(s["g"].t() @ s["x"])
    torch.matmul(s["g"], l.w, out=s["da"])


def candidates(l, direction):
    """A short list of tile configurations: tiles as wide as the channels (up to 128), so x is
    read once where it can be; rows per tile and warps varied."""
    if direction == "forward":
        bn, bk = pow2_between(l.n, 16, 128), pow2_between(l.k, 16, 64)
        return [(128, bn, bk, 4, 3), (128, bn, bk, 8, 3), (64, bn, bk, 4, 4),
                (256, min(bn, 64), bk, 8, 3)]
    bk_in, bn_in = pow2_between(l.k, 16, 128), pow2_between(l.n, 16, 64)
    bn, bk = pow2_between(l.n, 16, 128), pow2_between(l.k, 16, 128)
    tiles = triton.cdiv(l.n, bn) * triton.cdiv(l.k, bk)
    splits = max(1, min(triton.cdiv(l.rows, 256), (4 * 132) // tiles))
    inputs = [(128, bk_in, bn_in, 4, 3), (64, bk_in, bn_in, 4, 4)]
    weights = [(bn, bk, 64, splits, 4, 3), (bn, bk, 128, splits, 8, 3)]
    return [(i, w) for i in inputs for w in weights]


# ---- timing and checking -----------------------------------------------------------------------

def time_us(l, run):
    """Median of 7 timings of 10 replays of a CUDA graph that runs `run` once on each set."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for s in l.sets:  # compiles and warms up outside the capture
            run(s)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in l.sets:
            run(s)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000 / (10 * len(l.sets)))
    return sorted(times)[3]


def relative(got, want):
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def errors(l, direction, run):
    """Runs the fused form on set 0 (outputs poisoned first) against float64 references: the
    output, the sums (of the output as stored) and dw."""
    s = l.sets[0]
    for key in ("z", "da", "dw", "sums"):
        s[key].fill_(float("nan"))
    run(s)
    torch.cuda.synchronize()
    a = l.activate(s["x"]).half().double()
    if direction == "forward":
        z = s["z"].double()
        return {"out": relative(s["z"], a @ l.w.double().t()),
                "sum": max(relative(s["sums"][0, :l.n], z.sum(0)),
                           relative(s["sums"][1, :l.n], (z * z).sum(0)))}
    g, x = s["g"].double(), s["x"].double()
    dy = s["da"].double()
    if l.relu6:
        v = s["x"].float() * l.scale + l.shift
        dy = dy * ((v > 0) & (v < 6)).double()
    return {"out": relative(s["da"], g @ l.w.double()),
            "sum": max(relative(s["sums"][0, :l.k], dy.sum(0)),
                       relative(s["sums"][1, :l.k], (dy * x).sum(0))),
            "dw": relative(s["dw"], g.t() @ a)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--directions", default="forward,backward")
    p.add_argument("--seconds", type=float, default=480,
                   help="no new shape starts after this many seconds")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("triton_pointwise_probe: no CUDA device")
    start = time.monotonic()
    gen = torch.Generator(device="cuda").manual_seed(33)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}:"
          f" MobileNetV2's 1x1 convolutions, f16, batch {BATCH}, 224x224")
    forms = {"forward": (forward_fused, forward_eager, forward_gemm),
             "backward": (backward_fused, backward_eager, backward_gemm)}
    totals = {d: [0.0] * 4 for d in forms}
    wrong = False
    for shape in SHAPES:
        if time.monotonic() - start > a.seconds:
            print(f"-- stopped after {time.monotonic() - start:.0f} s: later shapes not run")
            break
        l = Layer(shape, gen)
        for direction in a.directions.split(","):
            fused, eager, gemm = forms[direction]
            timed = []
            for cfg in candidates(l, direction):
                try:
                    timed.append((time_us(l, lambda s, c=cfg: fused(l, s, c)), cfg))
                except Exception as e:  # a configuration Triton cannot compile or run
                    print(f"  {direction} {cfg}: {type(e).__name__}: {str(e)[:100]}")
            if not timed:
                print(f"{direction} {l.rows} x {l.k} -> {l.n}: no configuration ran")
                wrong = True
                continue
            best_us, best_cfg = min(timed)
            err = errors(l, direction, lambda s: fused(l, s, best_cfg))
            bad = [key for key, v in err.items() if not v <= TOLERANCE[key]]
            wrong |= bool(bad)
            eager_us, gemm_us, bound = time_us(l, lambda s: eager(l, s)), \
                time_us(l, lambda s: gemm(l, s)), l.bound_us(direction)
            for i, v in enumerate((best_us, eager_us, gemm_us, bound)):
                totals[direction][i] += v * l.count
            errs = " ".join(f"{key} {v:.1e}" for key, v in err.items())
            print(f"{direction:8} {l.rows:8} x {l.k:4} -> {l.n:4} {'relu6' if l.relu6 else 'bn':5}"
                  f" | triton {best_us:7.1f} | eager {eager_us:7.1f} | cuBLAS {gemm_us:7.1f}"
                  f" | bound {bound:6.1f} | {errs}{' WRONG ' + ','.join(bad) if bad else ''}"
                  f" | {best_cfg}", flush=True)
        del l
        torch.cuda.empty_cache()
    for direction in a.directions.split(","):
        t = totals[direction]
        print(f"{direction}, the layers run (us): triton {t[0]:.1f}, PyTorch eager passes "
              f"{t[1]:.1f}, cuBLAS GEMMs alone {t[2]:.1f}, bound {t[3]:.1f}")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
