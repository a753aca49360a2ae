"""The PyTorch peer of the quantization benchmark: the fmnist MLP trained as
anneal trains it, then torch.quantization.quantize_dynamic (int8 Linear
layers, the PyTorch path that applies to an MLP), both timed on batch
inference like `anneal bench`.

  python3 bench/torch_quantize.py THREADS EPOCHS BATCH  ->  one JSON line
"""
import json
import statistics
import sys
import time

import numpy as np
import torch

from torch_train import model_for, read_idx


def main():
    threads, epochs, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x = read_idx("train-images-idx3-ubyte.gz").astype(np.float32)
    y = read_idx("train-labels-idx1-ubyte.gz").astype(np.int64)
    xt = read_idx("t10k-images-idx3-ubyte.gz").astype(np.float32)
    yt = read_idx("t10k-labels-idx1-ubyte.gz").astype(np.int64)
    mean, std = x.mean(), x.std()
    x = torch.from_numpy((x - mean) / std).unsqueeze(1)
    xt = torch.from_numpy((xt - mean) / std).unsqueeze(1)
    y, yt = torch.from_numpy(y), torch.from_numpy(yt)
    model = model_for("mlp")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        perm = torch.randperm(len(y))
        for i in range(0, len(y), 128):
            idx = perm[i:i + 128]
            opt.zero_grad()
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    qmodel = torch.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    def accuracy(m):
        with torch.no_grad():
            return float((m(xt).argmax(1) == yt).float().mean())

    def throughput(m):
        rows = xt[:batch]
        with torch.no_grad():
            m(rows)
            one = time.perf_counter()
            m(rows)
            one = max(time.perf_counter() - one, 1e-6)
            reps = max(1, int(3.0 / 7 / one))
            runs = []
            for _ in range(7):
                t0 = time.perf_counter()
                for _ in range(reps):
                    torch.softmax(m(rows), 1)
                runs.append(reps * batch / (time.perf_counter() - t0))
        return statistics.median(runs)

    print(json.dumps({"fp32_accuracy": accuracy(model), "int8_accuracy": accuracy(qmodel),
                      "fp32_samples_per_s": throughput(model), "int8_samples_per_s": throughput(qmodel)}))


if __name__ == "__main__":
    main()
