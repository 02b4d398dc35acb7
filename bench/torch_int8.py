#!/usr/bin/env python3
"""PyTorch's quantized engine on the examples' models, for bench_int8 (1 thread).

    python3 bench/torch_int8.py BATCH [BATCH ...]

Builds the MLP (784-256-128-10), the CNN (conv 1->16 5x5 pad 2, ReLU, pool 2, conv 16->32 5x5
pad 2, ReLU, pool 2, fc 1568->10) and cnn-bn (BatchNorm after each conv), fuses conv/bn/relu and
linear/relu, calibrates on random data and converts with eager-mode static quantization, for
each quantized engine this torch has (Debian's 1.13: onednn, qnnpack; no fbgemm). Prints one
line per model, batch and engine:
    torch MODEL BATCH ENGINE FP32_SECONDS INT8_SECONDS
(the fastest of several trials per forward, as bench/bench_util.h times ours).
"""
import sys
import time

import torch
import torch.nn as nn
import torch.ao.quantization as tq


def mlp():
    return nn.Sequential(tq.QuantStub(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10), tq.DeQuantStub())


def cnn(bn):
    layers = [tq.QuantStub(), nn.Conv2d(1, 16, 5, padding=2)]
    if bn:
        layers.append(nn.BatchNorm2d(16))
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5, padding=2)]
    if bn:
        layers.append(nn.BatchNorm2d(32))
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 7 * 7, 10), tq.DeQuantStub()]
    return nn.Sequential(*layers)


def fuse_groups(model):
    """Index groups [conv, (bn), relu] / [linear, relu] to fuse in a Sequential."""
    mods = list(model)
    groups, i = [], 0
    while i < len(mods):
        if isinstance(mods[i], (nn.Conv2d, nn.Linear)):
            g = [i]
            j = i + 1
            if j < len(mods) and isinstance(mods[j], nn.BatchNorm2d):
                g.append(j)
                j += 1
            if j < len(mods) and isinstance(mods[j], nn.ReLU):
                g.append(j)
                j += 1
            if len(g) > 1:
                groups.append([str(k) for k in g])
            i = j
        else:
            i += 1
    return groups


def seconds_per_call(f):
    f()
    t0 = time.perf_counter()
    f()
    reps = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-9)))
    best = 1e30
    for _ in range(15):
        t1 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t1) / reps)
    return best


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    batches = [int(b) for b in sys.argv[1:]] or [64]
    engines = [e for e in ("onednn", "qnnpack", "fbgemm", "x86") if e in torch.backends.quantized.supported_engines]
    builders = {"mlp": mlp, "cnn": lambda: cnn(False), "cnn-bn": lambda: cnn(True)}
    for name, build in builders.items():
        shape = (784,) if name == "mlp" else (1, 28, 28)
        for batch in batches:
            x = torch.rand(batch, *shape)
            fp32 = build().eval()
            with torch.no_grad():
                t_fp32 = seconds_per_call(lambda: fp32(x))
            for engine in engines:
                torch.backends.quantized.engine = engine
                model = build().eval()
                model = tq.fuse_modules(model, fuse_groups(model))
                model.qconfig = tq.get_default_qconfig(engine)
                tq.prepare(model, inplace=True)
                with torch.no_grad():
                    for _ in range(4):
                        model(torch.rand(64, *shape))
                tq.convert(model, inplace=True)
                with torch.no_grad():
                    t_int8 = seconds_per_call(lambda: model(x))
                print(f"torch {name} {batch} {engine} {t_fp32:.9f} {t_int8:.9f}", flush=True)


if __name__ == "__main__":
    main()
