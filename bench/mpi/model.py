#!/usr/bin/env python3
"""Cost model of a data-parallel training step (docs/SCALING.md).

  model.py params                      the examples' parameter counts and gradient bytes
  model.py table SEC_MLP SEC_CNN       docs/SCALING.md's tables, from each model's
                                       measured compute seconds per sample on one rank
  model.py predict MODEL N SEC_PER_SAMPLE BITS_PER_S [LATENCY_S]
                                       -> "t_compute t_comm samples_per_s efficiency bytes_per_rank"
  model.py bytes MODEL                 its gradient bytes per step, G
  model.py check MODEL ONE_RANK_SAMPLES_PER_S STEPS < "RATE SAMPLES_PER_S COMM_SHARE BYTES TCP_MS" lines
                                       bench/mpi/netem.sh's table: 2 ranks measured against the model;
                                       the first line is the unlimited link

A step at N ranks with a global batch of B rows: every rank computes its
B/N rows (t_compute = B/N x seconds per sample), then the gradients (G =
4 x parameters bytes) are summed across ranks. A ring all-reduce sends
2(N-1)/N x G bytes from each rank, in 2(N-1) messages; anneal's
allreduce_sum (an MPI_Alltoall of N equal chunks, then an MPI_Allgather of
the summed chunks) sends exactly as much: (N-1)/N x G in each half. So
t_comm = 2(N-1)/N x G x 8 / bandwidth + 2(N-1) x latency, and the
efficiency (samples/s at N over N times one rank's) is
t_compute / (t_compute + t_comm) when nothing overlaps, and
t_compute / max(t_compute, t_comm) at best when the all-reduce overlaps the
backward pass completely.
"""
import re
import sys

# The layer stacks of docs/examples/fmnist-mlp.ini and fmnist-cnn.ini, on
# Fashion-MNIST's 1x28x28 images; read from the files when they are found.
EXAMPLES = {
    "mlp": "dense(256) relu dense(128) relu dense(10)",
    "cnn": "conv(32,3,pad=1) relu maxpool(2) conv(64,3,pad=1) relu maxpool(2) flatten dense(128) relu dense(10)",
}
INPUT = (1, 28, 28)
BATCH = 128
ROW_BYTES = 28 * 28 * 4 + 4  # one row rank 0 sends in `mpirun anneal train`: features and label, fp32
RANKS = (2, 4, 8, 16, 32, 64)
LINKS = (10e9, 25e9)
LATENCY = 30e-6  # one MPI message over kernel TCP on a 10/25 GbE LAN, one way (assumed, see docs/SCALING.md)


def layers_of(model):
    """The example's layers line, from docs/examples when this runs in the tree."""
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "examples", f"fmnist-{model}.ini")
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition("=")
                if key.strip() == "layers":
                    return value.split("#")[0].strip()
    except OSError:
        pass
    return EXAMPLES[model]


def parameters(layers, shape=INPUT):
    """Scalars over all parameters: weights and biases of dense and conv layers."""
    count = 0
    shape = tuple(shape)
    for layer in re.findall(r"\w+(?:\([^)]*\))?", layers):
        name, _, args = layer.partition("(")
        args = [a.strip() for a in args.rstrip(")").split(",") if a.strip()]
        positional = [int(a) for a in args if "=" not in a]
        named = {k: int(v) for k, v in (a.split("=") for a in args if "=" in a)}
        if name == "dense":
            inputs = 1
            for d in shape:
                inputs *= d
            count += inputs * positional[0] + positional[0]
            shape = (positional[0],)
        elif name == "conv":
            channels, height, width = shape
            filters, k = positional[0], positional[1]
            pad, stride = named.get("pad", 0), named.get("stride", 1)
            count += filters * channels * k * k + filters
            shape = (filters, (height + 2 * pad - k) // stride + 1, (width + 2 * pad - k) // stride + 1)
        elif name == "maxpool":
            channels, height, width = shape
            k = positional[0]
            shape = (channels, height // k, width // k)
        elif name == "flatten":
            size = 1
            for d in shape:
                size *= d
            shape = (size,)
        elif name in ("relu",):
            pass
        else:
            raise SystemExit(f"model.py: layer {layer!r}: expected dense, conv, maxpool, flatten or relu")
    return count


def gradient_bytes(model):
    return 4 * parameters(layers_of(model))


def step(model, ranks, sec_per_sample, bits_per_s, latency=LATENCY, rows=False, batch=BATCH):
    """(t_compute, t_comm, bytes each rank sends) of one step at `ranks` ranks, `batch` rows in all."""
    g = gradient_bytes(model)
    t_compute = batch / ranks * sec_per_sample
    sent = 2 * (ranks - 1) / ranks * g
    t_comm = sent * 8 / bits_per_s + 2 * (ranks - 1) * latency
    if rows:
        # `mpirun anneal train`: rank 0 sends each other rank its share of
        # the batch, one request and one answer each, from its one link.
        t_comm += (ranks - 1) / ranks * batch * ROW_BYTES * 8 / bits_per_s + 2 * (ranks - 1) * latency
    return t_compute, t_comm, sent


def efficiency_rows(sec, overlaps, rows=False, per_rank=False):
    out = []
    for model in ("mlp", "cnn"):
        for link in LINKS:
            for overlap in overlaps:
                cells = []
                for n in RANKS:
                    tc, tm, _ = step(model, n, sec[model], link, rows=rows, batch=BATCH * n if per_rank else BATCH)
                    cells.append("%.2f" % (tc / (max(tc, tm) if overlap else tc + tm)))
                out.append(f"| {model.upper()} | {link / 1e9:.0f} Gbit/s | {'full' if overlap else 'none'} | "
                           + " | ".join(cells) + " |")
    return out


def table(sec):
    head = ["| model | link | overlap | " + " | ".join(f"N={n}" for n in RANKS) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in RANKS) + " |"]
    out = ["Bytes each rank sends per step, 2(N-1)/N x G:", "",
           "| model | G | " + " | ".join(f"N={n}" for n in RANKS) + " |",
           "| --- | --- | " + " | ".join("---" for _ in RANKS) + " |"]
    for model in ("mlp", "cnn"):
        g = gradient_bytes(model)
        out.append(f"| {model.upper()} | {g / 1e6:.2f} MB | "
                   + " | ".join("%.2f MB" % (2 * (n - 1) / n * g / 1e6) for n in RANKS) + " |")
    out += ["", "Efficiency, global batch 128 (the examples as written: each rank computes 128/N rows):", ""]
    out += head + efficiency_rows(sec, (False, True))
    out += ["", "Efficiency, 128 rows per rank (batch = 128 x N):", ""]
    out += head + efficiency_rows(sec, (False, True), per_rank=True)
    out += ["", "Efficiency of `mpirun anneal train`, global batch 128: rank 0 also sends every rank its rows:", ""]
    out += head + efficiency_rows(sec, (False,), rows=True)
    return "\n".join(out)


def rate_bits(rate):
    """A tc rate (1gbit, 200mbit) in bits per second; None for unlimited."""
    if rate == "unlimited":
        return None
    match = re.fullmatch(r"(\d+)([gm])bit", rate)
    if not match:
        raise SystemExit(f"model.py: rate {rate!r}: expected unlimited or NUMBER gbit|mbit")
    return int(match[1]) * (1e9 if match[2] == "g" else 1e6)


def check(model, one, steps, lines):
    """Prints predicted against measured for 2 ranks at each rate (netem.sh)."""
    sec = 1 / one
    reference = None
    for line in lines:
        if not line.strip():
            continue
        rate, two, share, sent, tcp_ms = line.split()
        two, share, sent, tcp_ms = float(two), float(share), float(sent), float(tcp_ms)
        bits = rate_bits(rate)
        # Unlimited: the veth moves memory, so the model's rate term is ~0.
        tc, tm, predicted_bytes = step(model, 2, sec, bits or 1e15)
        link = tm - 2 * LATENCY
        step_s = BATCH / two
        comm = share * step_s
        if reference is None:
            reference = comm
            measured_link = "%8s" % "-"
        else:
            measured_link = "%6.1fms" % ((comm - reference) * 1e3)
        # Two exchanges of G/2 each way: the all-reduce's two halves at N = 2.
        print("%-4s %-9s %8.0f | %8.0f %8.0f | %5.2f %5.2f | %6.1fms %6.1fms | %6.1fms %s %6.1fms | %8.0f %8.0f" % (
            model, rate, one, BATCH / (tc + tm), two, tc / (tc + tm), two / (2 * one), tm * 1e3, comm * 1e3,
            link * 1e3, measured_link, 2 * tcp_ms, predicted_bytes, sent / steps))


def main(argv):
    if len(argv) >= 2 and argv[1] == "params" and len(argv) == 2:
        for model in ("mlp", "cnn"):
            p = parameters(layers_of(model))
            print(f"{model} {p} parameters, {4 * p} gradient bytes per step: {layers_of(model)}")
        return 0
    if len(argv) == 3 and argv[1] == "bytes" and argv[2] in EXAMPLES:
        print(gradient_bytes(argv[2]))
        return 0
    if len(argv) == 4 and argv[1] == "table":
        print(table({"mlp": float(argv[2]), "cnn": float(argv[3])}))
        return 0
    if len(argv) in (6, 7) and argv[1] == "predict" and argv[2] in EXAMPLES:
        ranks = int(argv[3])
        sec, bits = float(argv[4]), float(argv[5])
        latency = float(argv[6]) if len(argv) == 7 else LATENCY
        tc, tm, sent = step(argv[2], ranks, sec, bits, latency)
        print("%.6f %.6f %.1f %.4f %.0f" % (tc, tm, BATCH / (tc + tm), tc / (tc + tm), sent))
        return 0
    if len(argv) == 5 and argv[1] == "check" and argv[2] in EXAMPLES:
        check(argv[2], float(argv[3]), int(argv[4]), sys.stdin)
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
