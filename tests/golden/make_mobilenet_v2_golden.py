"""Writes the golden files for tests/models/golden_torchvision_test.cpp: a torchvision
MobileNetV2 (width 0.25, 1 input channel, 10 classes, random weights and BN statistics) saved as
safetensors in PyTorch's own names and OIHW layout (its state_dict exactly), and beside it an
input batch (NCHW) with the logits PyTorch computes for it in eval and in train mode.

Needs torch and torchvision (Debian: python3-torch python3-torchvision); no safetensors package:
the format (8-byte header length, JSON header, raw little-endian data) is written by hand.
usage: /usr/bin/python3 tests/golden/make_mobilenet_v2_golden.py \
           tests/golden/mobilenet_v2_w025.safetensors tests/golden/mobilenet_v2_w025_io.safetensors
"""
import json
import struct
import sys

import torch
import torchvision

DTYPES = {torch.float32: "F32", torch.int64: "I64"}


def save(path, tensors, metadata):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.25)
    model.features[0][0] = torch.nn.Conv2d(1, 8, 3, 2, 1, bias=False)
    with torch.no_grad():  # non-trivial BN statistics and affine parameters
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.num_batches_tracked.fill_(7)
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, 0.1)
                m.bias.uniform_(-0.1, 0.1)
    x = torch.randn(4, 1, 32, 32)
    # Saved before the train-mode pass below, which updates the running statistics.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    with torch.no_grad():
        eval_logits = model(x)
    model.train()
    model.classifier[0].p = 0.0  # no dropout so train mode is deterministic
    with torch.no_grad():
        train_logits = model(x)
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__}
    save(sys.argv[1], state, versions)
    save(sys.argv[2], {"input_nchw": x, "eval_logits": eval_logits, "train_logits": train_logits},
         versions)


if __name__ == "__main__":
    main()
