#!/usr/bin/env python3
"""The PyTorch twin of train_step_bench: times one MobileNetV2 training step (forward,
cross-entropy, backward, SGD momentum 0.9) on a fixed random batch and prints the same fields.

  python3 bench/torch_train_step.py --device cuda --batch 128 --input 3x224x224 --classes 1000 --json

Under torchrun (WORLD_SIZE > 1) it is one rank of DistributedDataParallel over NCCL: each rank
trains --batch images of its own on cuda:LOCAL_RANK, and rank 0 alone prints, with img_per_s
counting every rank's images (the twin of train_step_bench under frugal launch).
"""
import argparse
import json
import platform
import resource
import statistics
import sys
import time


def parse_chw(text):
    parts = text.split("x")
    try:
        chw = [int(p) for p in parts]
    except ValueError:
        chw = []
    if len(chw) != 3 or min(chw) <= 0:
        raise argparse.ArgumentTypeError(f"--input wants CxHxW, e.g. 3x224x224, got '{text}'")
    return chw


def proc_status_bytes(field):
    """A field of /proc/self/status in bytes (VmHWM, VmRSS); -1 when unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def reset_peak_rss():
    """Resets the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def mobilenet_v1(torch, torchvision, classes):
    """frugal's MobileNetV1 (models/mobilenet_v1.cpp; torchvision has none): the paper's body,
    each conv with BatchNorm and ReLU, dropout 0.2 before the classifier."""
    from torchvision.ops import Conv2dNormActivation as ConvBN

    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
              (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]
    layers, c_in = [ConvBN(3, 32, 3, stride=2)], 32
    for c, s in blocks:
        layers.append(torch.nn.Sequential(ConvBN(c_in, c_in, 3, stride=s, groups=c_in),
                                          ConvBN(c_in, c, 1)))
        c_in = c
    return torch.nn.Sequential(torch.nn.Sequential(*layers), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(1), torch.nn.Dropout(0.2),
                               torch.nn.Linear(c_in, classes))


def build_model(torch, torchvision, in_channels, classes, name="mobilenet_v2"):
    if name == "mobilenet_v1":
        assert in_channels == 3, "only mobilenet_v2 takes other input channels here"
        return mobilenet_v1(torch, torchvision, classes)
    if name != "mobilenet_v2":
        assert in_channels == 3, "only mobilenet_v2 takes other input channels here"
        if name == "resnet18":
            return torchvision.models.resnet18(num_classes=classes)
        return getattr(torchvision.models, name)(num_classes=classes)
    model = torchvision.models.mobilenet_v2(num_classes=classes)
    if in_channels != 3:
        # torchvision's first conv is features[0][0]: Conv2d(3, 32, 3, stride 2, padding 1).
        old = model.features[0][0]
        model.features[0][0] = torch.nn.Conv2d(in_channels, old.out_channels, old.kernel_size,
                                               old.stride, old.padding, bias=False)
    return model


def with_checkpointing(torch, model, name, mode):
    """model's forward with torch.utils.checkpoint applied as frugal's --checkpoint does."""
    if mode == "none":
        return model
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential
    blocks = []
    if name == "resnet18":
        stages = [model.layer1, model.layer2, model.layer3, model.layer4]
        blocks = [(s, i) for s in stages for i in range(len(s))]
    elif name == "efficientnet_b0":
        blocks = [(s, i) for s in model.features[1:8] for i in range(len(s))]
        blocks += [(model.features, 0), (model.features, 8)]
    else:
        blocks = [(model.features, i) for i in range(len(model.features))]
    if mode == "blocks":
        class Checkpointed(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return checkpoint(self.inner, x, use_reentrant=False)
        for parent, i in blocks:
            parent[i] = Checkpointed(parent[i])
        return model
    segments = int(mode)
    assert name != "resnet18", "segments: feature models only"

    def forward(x):
        h = checkpoint_sequential(model.features, segments, x, use_reentrant=False)
        h = torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)
        return model.classifier(h)
    return forward


def print_kernel_profile(torch, step):
    """One step under torch.profiler; its GPU kernels grouped by name, longest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    totals = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            t, n = totals.get(ev.name, (0.0, 0))
            us = getattr(ev, "device_time_total", None)
            if us is None:  # releases before 2.4 name it after CUDA
                us = ev.cuda_time_total
            totals[ev.name] = (t + us, n + 1)  # microseconds
    all_us = max(sum(t for t, _ in totals.values()), 1e-9)
    print(f"pytorch kernels of one step: {all_us / 1000:.2f} ms in {sum(n for _, n in totals.values())} "
          "launches", file=sys.stderr)
    for name, (t, n) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:40]:
        print(f"{t / 1000:9.3f} ms {100 * t / all_us:5.1f}% {n:5d}x  {name[:110]}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--model", default="mobilenet_v2",
                   choices=["mobilenet_v2", "resnet18", "efficientnet_b0", "mobilenet_v1"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--input", type=parse_chw, default=parse_chw("1x32x32"))
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--precision", default="f32", choices=["f32", "f16", "bf16"],
                   help="f16/bf16: autocast around forward and loss (GradScaler for f16)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--channels-last", choices=["auto", "on", "off"], default="auto",
                   help="auto: on for CUDA, off for the CPU")
    p.add_argument("--json", action="store_true")
    p.add_argument("--graph", action="store_true",
                   help="CUDA: replay the step from a CUDA graph captured after warm-up, the way "
                        "PyTorch's CUDA-semantics notes describe (whole step for f32/bf16; for f16 "
                        "forward, loss and scaled backward, with GradScaler.step eager, since it "
                        "synchronises)")
    p.add_argument("--checkpoint", default="none",
                   help="none, blocks (torch.utils.checkpoint around every block) or N "
                        "(checkpoint_sequential over the feature layers)")
    p.add_argument("--compile", default="none",
                   help="none, default (torch.compile), a torch.compile mode "
                        "(max-autotune-no-cudagraphs, max-autotune, reduce-overhead), or "
                        "budget:X (torch.compile with "
                        "torch._functorch.config.activation_memory_budget = X)")
    p.add_argument("--memory-cap-mib", type=int, default=0,
                   help="CUDA: cap with torch.cuda.set_per_process_memory_fraction")
    p.add_argument("--profile", action="store_true",
                   help="after the timed steps, print the GPU kernels of one more step "
                        "(torch.profiler) to stderr")
    p.add_argument("--ncu-range", action="store_true",
                   help="CUDA: after the timed steps, run one more step between "
                        "cudaProfilerStart and cudaProfilerStop, for ncu --profile-from-start off")
    a = p.parse_args()
    if a.batch < 1 or a.classes < 2 or a.warmup < 1 or a.steps < 1:
        p.error("--batch, --warmup and --steps must be >= 1 and --classes >= 2")

    import os

    import torch
    import torchvision

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        if a.device != "cuda":
            p.error("several ranks need --device cuda (NCCL)")
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", local))
    torch.manual_seed(a.seed + rank)  # each rank its own batch; DDP broadcasts rank 0's weights
    dev = torch.device(a.device) if world == 1 else torch.device("cuda", torch.cuda.current_device())
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
    channels_last = a.channels_last == "on" or (a.channels_last == "auto" and dev.type == "cuda")
    fmt = torch.channels_last if channels_last else torch.contiguous_format

    c, h, w = a.input
    model = build_model(torch, torchvision, c, a.classes, a.model).to(dev, memory_format=fmt).train()
    if a.memory_cap_mib > 0 and dev.type == "cuda":
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(a.memory_cap_mib * 2.0**20 / total,
                                                   dev.index or 0)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    forward = with_checkpointing(torch, model, a.model, a.checkpoint)
    if a.compile != "none":
        if a.compile.startswith("budget:"):
            torch._functorch.config.activation_memory_budget = float(a.compile.split(":", 1)[1])
        mode = a.compile if a.compile in ("max-autotune-no-cudagraphs", "max-autotune",
                                          "reduce-overhead") else None
        # The step enters autocast outside the compiled forward, and AOTAutograd's cache keys
        # only whether autocast is on, not its dtype (pytorch/pytorch#181564), so an f16 process
        # can be served the graph a bf16 one compiled into the same cache directory. Session 26
        # saw it: an f16 max-autotune compile after bf16 ones timed no kernel and wrote no f16
        # timings; the same compile with only the timings file in its cache timed f16 kernels.
        # Without that cache the compile still reuses inductor's FX graph cache, whose graphs
        # carry their casts.
        if hasattr(torch._functorch.config, "enable_autograd_cache"):
            torch._functorch.config.enable_autograd_cache = False
        forward = torch.compile(forward, mode=mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(a.batch, c, h, w, device=dev).contiguous(memory_format=fmt)
    labels = torch.randint(0, a.classes, (a.batch,), device=dev)

    amp_dtype = {"f32": None, "f16": torch.float16, "bf16": torch.bfloat16}[a.precision]
    if hasattr(torch.amp, "GradScaler"):  # torch >= 2.3
        scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == "f16")
    else:  # older releases (Debian's 1.13) have only the CUDA scaler
        scaler = torch.cuda.amp.GradScaler(enabled=a.precision == "f16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = torch.nn.functional.cross_entropy(forward(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    graphed = a.graph and dev.type == "cuda"
    if graphed:
        # Warm-up on a side stream, as torch.cuda.graph requires, then capture. Autocast's weight
        # cache must be off inside a capture (PyTorch's CUDA-semantics notes).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(a.warmup):
                loss = step()
        torch.cuda.current_stream().wait_stream(side)
        warmup_loss = loss.item()
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            with torch.autocast(dev.type, dtype=amp_dtype, enabled=amp_dtype is not None,
                                cache_enabled=False):
                static_loss = torch.nn.functional.cross_entropy(model(images), labels)
            scaler.scale(static_loss).backward()
            if a.precision != "f16":
                opt.step()

        def step():  # noqa: F811 -- the replayed step
            graph.replay()
            if a.precision == "f16":
                scaler.step(opt)  # unscale, found-inf read back, SGD: eager
                scaler.update()
            return static_loss
        loss = step()
    else:
        warmup_start = time.perf_counter()
        for _ in range(a.warmup):
            loss = step()
        warmup_loss = loss.item()  # synchronises
    warmup_seconds = time.perf_counter() - warmup_start if not graphed else None

    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    # ru_maxrss follows the reset below, so the whole-process peak is read before it.
    max_rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rss_reset = reset_peak_rss()
    rss_before = proc_status_bytes("VmRSS")

    times = []
    wall0 = time.perf_counter()
    if dev.type == "cuda":
        stream = torch.cuda.current_stream()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(a.steps)]
        for start, end in events:
            start.record(stream)
            loss = step()
            end.record(stream)
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in events]
    else:
        for _ in range(a.steps):
            t0 = time.perf_counter()
            loss = step()
            times.append(1000.0 * (time.perf_counter() - t0))
    wall_ms = 1000.0 * (time.perf_counter() - wall0)
    final_loss = loss.item()
    if final_loss != final_loss or abs(final_loss) == float("inf"):
        sys.exit("torch_train_step: loss is not finite after the steps")

    if a.profile and dev.type == "cuda":
        print_kernel_profile(torch, step)
    if a.ncu_range and dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()

    peak_rss_timed = proc_status_bytes("VmHWM") if rss_reset else -1
    med = statistics.median(times)
    if dev.type == "cuda":
        peak_alloc = torch.cuda.max_memory_allocated()
        peak_reserved = torch.cuda.max_memory_reserved()
        measured = ("torch.cuda.max_memory_allocated/reserved over the timed steps, after "
                    "reset_peak_memory_stats following warm-up (parameters, gradients, momentum, "
                    "batch included)")
        name = torch.cuda.get_device_name(dev)
    else:
        peak_alloc = peak_reserved = None  # PyTorch's CPU allocator keeps no statistics
        measured = ("process RSS only: peak_rss_timed_bytes is VmHWM over the timed steps "
                    "after a reset, max_rss_bytes is getrusage's ru_maxrss for the whole process")
        name = cpu_name()

    out = {
        "impl": "pytorch",
        "model": a.model,
        "device": dev.type,
        "device_name": name,
        "precision": a.precision,
        "graph": graphed,
        "config": f"checkpoint {a.checkpoint}" + ("" if a.compile == "none" else f", compile {a.compile}"),
        "layout": "channels_last" if channels_last else "NCHW",
        "batch": a.batch,
        "input": "x".join(str(v) for v in a.input),
        "classes": a.classes,
        "warmup": a.warmup,
        "steps": a.steps,
        "threads": torch.get_num_threads() if dev.type == "cpu" else 0,
        "timer": "cuda events on the current stream" if dev.type == "cuda" else "perf_counter",
        "median_ms": med,
        "min_ms": min(times),
        "max_ms": max(times),
        "mean_wall_ms": wall_ms / a.steps,
        "world_size": world,
        "img_per_s": 1000.0 * a.batch * world / med if med > 0 else 0.0,
        "peak_allocated_bytes": peak_alloc,
        "peak_reserved_bytes": peak_reserved,
        "memory_measured": measured,
        "peak_rss_timed_bytes": peak_rss_timed,
        "rss_before_timed_bytes": rss_before,
        "max_rss_bytes": max(max_rss_before, peak_rss_timed,
                             resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
        "num_parameters": sum(t.numel() for t in model.parameters()),
        "loss_after_warmup": warmup_loss,
        "loss_final": final_loss,
        "warmup_seconds": warmup_seconds,  # torch.compile's compile time is in here
        "torch_version": torch.__version__,
    }
    if world > 1:
        torch.distributed.destroy_process_group()
        if rank != 0:
            return
    if a.json:
        print(json.dumps(out))
        return
    mib = 1024.0 * 1024.0
    print(f"pytorch {a.model} on {dev.type} ({name}), batch {a.batch}, input {out['input']}, "
          f"{a.classes} classes, {a.precision}, {out['layout']}")
    print(f"  {a.warmup} warm-up + {a.steps} timed steps ({out['timer']}): median {med:.2f} ms, "
          f"min {out['min_ms']:.2f}, max {out['max_ms']:.2f}, mean wall {out['mean_wall_ms']:.2f} ms")
    print(f"  {out['img_per_s']:.1f} img/s")
    if peak_alloc is not None:
        print(f"  peak allocated {peak_alloc / mib:.1f} MiB, peak reserved "
              f"{peak_reserved / mib:.1f} MiB ({measured})")
    print(f"  process RSS: peak over timed steps {out['peak_rss_timed_bytes'] / mib:.1f} MiB, "
          f"max over the process {out['max_rss_bytes'] / mib:.1f} MiB")
    print(f"  loss after warm-up {warmup_loss:.4f}, after the timed steps {final_loss:.4f}")


if __name__ == "__main__":
    main()
