"""The PyTorch peer of the training benchmark: the same models, data,
standardization, optimizer and batch size as anneal's, timed the same way.

  python3 bench/torch_train.py MODEL THREADS EPOCHS [DEVICE [BATCH]]  ->  one JSON line
MODEL is mlp or cnn; DEVICE cpu (the default) or cuda; BATCH 128 unless
given. Reads Fashion-MNIST from Debian's dataset-fashion-mnist, or from
$FMNIST_DIR. On cuda the data stays in host memory and each batch is copied
to the GPU, as anneal's batch pipeline does.
Besides samples/s over the training loop, the line holds first_step_s: the
seconds from the process's start (the interpreter's own start and the torch
import included) to the end of the first optimizer step, measured as anneal
measures its own, from the kernel's start time of the process.
"""
import gzip
import json
import os
import resource
import struct
import sys
import time

import numpy as np
import torch

DATA = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")


def process_uptime_seconds():
    """Seconds since the kernel started this process (clock-tick precision)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    return time.clock_gettime(time.CLOCK_BOOTTIME) - started


def read_idx(name):
    with gzip.open(f"{DATA}/{name}", "rb") as f:
        raw = f.read()
    rank = raw[3]
    dims = struct.unpack(">" + "I" * rank, raw[4:4 + 4 * rank])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def model_for(kind):
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    kind, threads, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    device = torch.device(sys.argv[4] if len(sys.argv) > 4 else "cpu")
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 128
    if device.type == "cuda":
        # fp32 as anneal computes it: no TF32 in matrix products or convolutions.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x_train = read_idx("train-images-idx3-ubyte.gz").astype(np.float32)
    y_train = read_idx("train-labels-idx1-ubyte.gz").astype(np.int64)
    x_test = read_idx("t10k-images-idx3-ubyte.gz").astype(np.float32)
    y_test = read_idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)
    # Standardize with the training split's statistics, as anneal does.
    mean, std = x_train.mean(), x_train.std()
    x_train = torch.from_numpy((x_train - mean) / std).reshape(-1, 1, 28, 28)
    x_test = torch.from_numpy((x_test - mean) / std).reshape(-1, 1, 28, 28)
    y_train, y_test = torch.from_numpy(y_train), torch.from_numpy(y_test)

    model = model_for(kind).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1)
    samples = 0
    first_step_s = None
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(x_train), generator=generator)
        model.train()
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            optimizer.zero_grad(set_to_none=True)
            xb, yb = x_train[idx].to(device), y_train[idx].to(device)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            if first_step_s is None:
                first_step_s = process_uptime_seconds()
            samples += len(idx)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x_test[i:i + 1000].to(device)).argmax(1).cpu() == y_test[i:i + 1000]).sum())
                      for i in range(0, len(x_test), 1000))
    print(json.dumps({
        "samples_per_s": samples / seconds,
        "test_accuracy": correct / len(x_test),
        "first_step_s": first_step_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
