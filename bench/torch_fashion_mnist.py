"""Reference run: torchvision's MobileNetV2 on Fashion-MNIST with the recipe `frugal train` uses
(32x32 bilinear resize, normalise, random crop 28 pad 2 + flip, SGD momentum 0.9, weight decay
4e-5, cosine schedule per step), to compare accuracy per epoch side by side.

usage: python3 bench/torch_fashion_mnist.py --data-dir .data --epochs 2 [--lr 0.05] [--no-augment]
"""
import argparse, gzip, time
import numpy as np
import torch
import torch.nn.functional as F
import torchvision


def load(dir, split):
    with gzip.open(f"{dir}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(f"{dir}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(x, dtype=torch.float32).unsqueeze(1) / 255.0, torch.tensor(y, dtype=torch.long)


def prep(x, augment, gen):
    if augment:
        n = x.shape[0]
        x = F.pad(x, (2, 2, 2, 2))
        i = torch.randint(0, 5, (n,), generator=gen)
        j = torch.randint(0, 5, (n,), generator=gen)
        x = torch.stack([x[k, :, i[k]:i[k] + 28, j[k]:j[k] + 28] for k in range(n)])
        flip = torch.rand(n, generator=gen) < 0.5
        x[flip] = x[flip].flip(-1)
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False)
    return (x - 0.2860) / 0.3530


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--no-augment", action="store_true")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "t10k")
    model = torchvision.models.mobilenet_v2(num_classes=10)
    model.features[0][0] = torch.nn.Conv2d(1, 32, 3, 2, 1, bias=False)
    torch.nn.init.kaiming_normal_(model.features[0][0].weight, mode="fan_out")
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=4e-5)
    steps = len(xtr) // a.batch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, a.epochs * steps)
    xte_p = prep(xte, False, gen).to(dev)
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        t0, total = time.time(), 0.0
        for s in range(steps):
            idx = perm[s * a.batch:(s + 1) * a.batch]
            x = prep(xtr[idx], not a.no_augment, gen).to(dev)
            loss = F.cross_entropy(model(x), ytr[idx].to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item()
        model.eval()
        with torch.no_grad():
            acc = sum((model(xte_p[k:k + 1000]).argmax(1).cpu() == yte[k:k + 1000]).sum().item()
                      for k in range(0, len(xte), 1000)) / len(xte)
        print(f"torch epoch {epoch + 1}/{a.epochs}: train loss {total / steps:.4f}, "
              f"test accuracy {100 * acc:.2f}%, {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
