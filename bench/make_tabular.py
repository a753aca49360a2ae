#!/usr/bin/python3
"""Writes a tabular CSV of about SIZE bytes for the import memory benchmark.

    /usr/bin/python3 bench/make_tabular.py OUT.csv SIZE [--seed N]

SIZE takes K, M or G suffixes (powers of 1000). 20 numeric columns x0..x19,
two categorical columns (region: 10 levels, channel: 8 levels) and a label
`class` with 3 classes that a model can learn from the features: the class
is the argmax of three fixed linear scores of x0..x5 and the region, plus
noise. Deterministic: the same SIZE and seed give the same bytes. The data
is written in blocks of rows with numpy, so a file of several GB takes
minutes, not hours. Never commit what it writes.
"""
import argparse
import sys

import numpy as np

NUMERIC = 20
REGIONS = ["north", "south", "east", "west", "central", "coast", "mountain", "valley", "island", "metro"]
CHANNELS = ["web", "store", "phone", "partner", "catalog", "app", "kiosk", "fair"]
BLOCK_ROWS = 50_000


def parse_size(text):
    scale = {"K": 10**3, "M": 10**6, "G": 10**9}
    if text and text[-1].upper() in scale:
        return int(float(text[:-1]) * scale[text[-1].upper()])
    return int(text)


def block_text(rng, weights):
    x = rng.standard_normal((BLOCK_ROWS, NUMERIC)).astype(np.float32)
    x[:, 10:] = x[:, 10:] * 100 + 500  # some columns on another scale
    region = rng.integers(0, len(REGIONS), BLOCK_ROWS)
    channel = rng.integers(0, len(CHANNELS), BLOCK_ROWS)
    scores = x[:, :6] @ weights + (region[:, None] % 3 == np.arange(3)) * 0.8
    scores += rng.standard_normal(scores.shape) * 0.3
    label = scores.argmax(axis=1)
    numbers = np.char.mod("%.4f", x)
    lines = [",".join(row) for row in numbers]
    return "".join(
        f"{line},{REGIONS[r]},{CHANNELS[c]},c{y}\n" for line, r, c, y in zip(lines, region, channel, label)
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("size")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    target = parse_size(args.size)
    rng = np.random.default_rng(args.seed)
    weights = np.random.default_rng(12345).standard_normal((6, 3)).astype(np.float32)
    header = ",".join([f"x{i}" for i in range(NUMERIC)] + ["region", "channel", "class"]) + "\n"
    written = 0
    with open(args.out, "w", encoding="ascii", newline="") as out:
        out.write(header)
        written += len(header)
        while written < target:
            text = block_text(rng, weights)
            if written + len(text) > target:  # cut the last block at a line end
                cut = text.rfind("\n", 0, target - written) + 1
                text = text[:cut] if cut > 0 else text[: text.find("\n") + 1]
            out.write(text)
            written += len(text)
    print(f"{args.out}: {written} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
