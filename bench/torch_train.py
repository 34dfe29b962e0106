#!/usr/bin/env python3
"""The operator-parallel tutorial network (examples/nets/operator_parallel.json) trained in
PyTorch on one thread: the yardstick for sk-sim's single-device step time.

    python3 bench/torch_train.py [--net examples/nets/operator_parallel.json] [--steps 200]
                                 [--warmup 20] [--dtype f64] [--data DIR]

The graph is read from the JSON file, not re-typed here: the input [B, 1, 28, 28] flattened,
then MatMul by each parameter in turn (no bias, as in the JSON) with ReLU between them, and the
mean softmax cross-entropy over the labels; SGD with the JSON's learning rate (rounded to f32,
as sk_train.h holds it). One step is what sk-sim times as a step: take the next batch, forward,
backward, update.

Data: Fashion-MNIST from DIR (default /usr/share/datasets/fashion-mnist, Debian's
dataset-fashion-mnist), normalised as examples/fashion_mnist.h does and batched in the same
order without shuffling. Without the files it falls back to synthetic data of the same shapes
(printed as "data synthetic"): the step time does not depend on the values.

Threads: torch.set_num_threads(1) bounds ATen's own pool, but the OpenBLAS that torch reaches
through libblas.so.3 keeps its own thread count. Run with OPENBLAS_NUM_THREADS=1 (the driver
bench/train_vs_torch.sh does) so that both sides compute a step on one core.

Output: a line "torch: ..." describing the run, then the parseable line
    median_step_ms=<float> median_cpu_ms=<float> steps=<int> dtype=<name> threads=<int>
the median step's wall time and the median step's CPU time of the process (which, on a shared
machine, leaves out the time another process held the core).
"""
import argparse
import gzip
import json
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch

MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def load_idx(path_base, magic, want_dims):
    for path, opener in ((path_base + ".gz", gzip.open), (path_base, open)):
        if os.path.exists(path):
            with opener(path, "rb") as f:
                head = f.read(4 + 4 * want_dims)
                got_magic, *dims = struct.unpack(">%dI" % (1 + want_dims), head)
                if got_magic != magic:
                    sys.exit("%s: not an idx file (magic %#x)" % (path, got_magic))
                return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)
    return None


def load_train(data_dir):
    """Images normalised as examples/fashion_mnist.h does (in f32), and labels; None if absent."""
    images = load_idx(os.path.join(data_dir, "train-images-idx3-ubyte"), 0x803, 3)
    labels = load_idx(os.path.join(data_dir, "train-labels-idx1-ubyte"), 0x801, 1)
    if images is None or labels is None:
        return None
    x = (images.astype(np.float32) / np.float32(255.0) - np.float32(0.1307)) / np.float32(0.3081)
    return x.reshape(len(x), -1), labels.astype(np.int64)


def parse_net(path):
    """The chain the JSON describes: [(kind, parameter name or None)], input and label shapes."""
    net = json.load(open(path))
    tensors = {t["name"]: t for t in net["tensors"]}
    chain = []
    for op in net["operators"]:
        kind = op["type"]
        if kind == "MatMul":
            chain.append(("matmul", op["inputs"][1]))
        elif kind in ("ReLU", "Flatten", "SoftmaxCrossEntropy"):
            chain.append((kind.lower(), None))
        else:
            sys.exit("%s: operator type %s is not handled by this bench" % (path, kind))
    inputs = [t for t in net["tensors"] if t["role"] == "input"]
    params = [t for t in net["tensors"] if t["role"] == "parameter"]
    lr = float(np.float32(net.get("optimizer", {}).get("lr", 0.01)))
    return chain, inputs, params, lr, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", default="examples/nets/operator_parallel.json")
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--dtype", default="f64", choices=["f32", "f64"])
    ap.add_argument("--data", default=os.environ.get("DATA_PATH") or MNIST_DIR)
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(1)
    dt = torch.float64 if a.dtype == "f64" else torch.float32
    chain, inputs, params, lr, tensors = parse_net(a.net)
    xshape = inputs[0]["shape"]
    batch = xshape[0]
    per_x = int(np.prod(xshape[1:]))

    train = load_train(a.data)
    if train is not None and train[0].shape[1] == per_x:
        xs, ys = torch.from_numpy(train[0]), torch.from_numpy(train[1])
        source = "fashion-mnist"
    else:
        nb = a.warmup + a.steps
        xs = torch.randn(nb * batch, per_x, dtype=torch.float32)
        ys = torch.randint(0, tensors[params[-1]["name"]]["shape"][-1], (nb * batch,))
        source = "synthetic"
    nbatches = len(xs) // batch

    w = {}
    for p in params:  # uniform(-v, v) as the JSON's init; values do not change the time
        v = p["init"]["value"]
        w[p["name"]] = ((torch.rand(*p["shape"], dtype=dt) * 2 - 1) * v).requires_grad_(True)

    def step(b):
        s = b % nbatches
        x = xs[s * batch:(s + 1) * batch].to(dt)  # the feed: f32 images converted to the run's dtype
        y = ys[s * batch:(s + 1) * batch]
        h = x
        for kind, pname in chain:
            if kind == "flatten":
                h = h.reshape(batch, -1)
            elif kind == "matmul":
                h = h @ w[pname]
            elif kind == "relu":
                h = torch.relu(h)
            else:
                h = torch.nn.functional.cross_entropy(h, y)
        for t in w.values():
            t.grad = None
        h.backward()
        with torch.no_grad():
            for t in w.values():
                t.add_(t.grad, alpha=-lr)
        return h.item()

    first, loss = None, float("nan")
    for b in range(a.warmup):
        loss = step(b)
        first = loss if first is None else first
    times, cpu = [], []
    for b in range(a.warmup, a.warmup + a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step(b)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print("torch: %s %s, batch %d, data %s, lr %g, loss %s -> %.4f, OPENBLAS_NUM_THREADS=%s" %
          (torch.__version__, a.dtype, batch, source, lr, "%.4f" % first if first is not None else "-", loss,
           os.environ.get("OPENBLAS_NUM_THREADS", "(unset)")))
    print("median_step_ms=%.4f median_cpu_ms=%.4f steps=%d dtype=%s threads=%d" %
          (statistics.median(times) * 1e3, statistics.median(cpu) * 1e3, a.steps, a.dtype, torch.get_num_threads()))


if __name__ == "__main__":
    main()
