#!/usr/bin/python3
"""An independent reader of anneal model and checkpoint blobs.

Written from docs/STORE.md alone (the "Objects", "Streams and chunking" and
"Models and checkpoints" sections), with no anneal code: it proves the
document says enough to load a model and reproduce its predictions.
Python 3 and numpy; stores are read with sqlite3 and the zstd command.

  read_model.py blob --store STORE --model NAME@vN -o FILE       the model's blob
  read_model.py blob --store STORE --checkpoint RUN_ID:STEP -o FILE
  read_model.py stream --store STORE --dataset NAME@vN --role ROLE -o FILE
  read_model.py info MODEL                 header summary and tensor table (JSON)
  read_model.py predict MODEL --csv FILE   predictions as `anneal predict` writes them
  read_model.py predict MODEL --raw F32 [--json]  raw rows in the store's layout (f32 LE)
  read_model.py hash MODEL                 recompute weights_hash by its format's rule; exit 1 on mismatch
  read_model.py checkpoint CKPT            header, trainer state fields, history, tensors (JSON)
  read_model.py annotate BLOB NAME         the document's annotated hex of a blob
"""
import argparse
import csv
import datetime
import hashlib
import json
import math
import sqlite3
import struct
import subprocess
import sys

import numpy as np


class FormatError(Exception):
    pass


# ---------------------------------------------------------------- the store

def read_object(store, oid):
    with open(f"{store}/objects/{oid[:2]}/{oid}", "rb") as f:
        raw = f.read()
    if raw[:4] != b"ANOB" or raw[4] != 1 or raw[5] != 1:
        raise FormatError(f"object {oid}: bad header")
    (length,) = struct.unpack_from("<Q", raw, 8)
    data = subprocess.run(["zstd", "-d", "-c", "-q"], input=raw[16:], stdout=subprocess.PIPE,
                          check=True).stdout
    if len(data) != length or hashlib.blake2b(data, digest_size=32).hexdigest() != oid:
        raise FormatError(f"object {oid}: length or hash mismatch")
    return data


def read_blob(store, blob):
    db = sqlite3.connect(f"file:{store}/catalog.db?mode=ro", uri=True)
    (size,) = db.execute("SELECT size FROM blobs WHERE hash = ?", (blob,)).fetchone()
    chunks = db.execute("SELECT object, length FROM blob_chunks WHERE blob = ? ORDER BY seq", (blob,)).fetchall()
    tree = "".join(f"{oid} {length}\n" for oid, length in chunks).encode()
    if hashlib.blake2b(tree, digest_size=32).hexdigest() != blob:
        raise FormatError(f"blob {blob}: chunk list does not reproduce its id")
    data = b"".join(read_object(store, oid) for oid, _ in chunks)
    if len(data) != size:
        raise FormatError(f"blob {blob}: size mismatch")
    return data


def split_ref(ref):
    name, _, version = ref.partition("@v")
    return name, int(version)


def model_blob(store, ref):
    db = sqlite3.connect(f"file:{store}/catalog.db?mode=ro", uri=True)
    name, version = split_ref(ref)
    (blob,) = db.execute("SELECT blob FROM models WHERE name = ? AND version = ?", (name, version)).fetchone()
    return read_blob(store, blob)


def checkpoint_blob(store, run_step):
    run, step = (int(v) for v in run_step.split(":"))
    db = sqlite3.connect(f"file:{store}/catalog.db?mode=ro", uri=True)
    (blob,) = db.execute("SELECT blob FROM checkpoints WHERE run_id = ? AND step = ?", (run, step)).fetchone()
    return read_blob(store, blob)


def dataset_stream(store, ref, role):
    db = sqlite3.connect(f"file:{store}/catalog.db?mode=ro", uri=True)
    name, version = split_ref(ref)
    (blob,) = db.execute(
        "SELECT s.blob FROM dataset_streams s JOIN dataset_versions v ON s.version_id = v.id "
        "JOIN datasets d ON v.dataset_id = d.id WHERE d.name = ? AND v.version = ? AND s.role = ?",
        (name, version, role)).fetchone()
    return read_blob(store, blob)


# ------------------------------------------------------------------ framing

def unframe(data, magic):
    if len(data) < 16 or data[:8] != magic:
        raise FormatError(f"not a {magic.decode()} blob")
    (n,) = struct.unpack_from("<Q", data, 8)
    if n > len(data) - 16:
        raise FormatError("header runs past the end")
    return json.loads(data[16:16 + n].decode("utf-8")), data[16 + n:], 16 + n


def f32(values):
    return np.asarray(values, dtype=np.float32)


def tensor_layout(header):
    """Format 1 or 2: how the tensor table lays out the payload (3 is 1's, 4 is 2's)."""
    fmt = header["format"]
    if fmt not in (1, 2, 3, 4):
        raise FormatError(f"model format {fmt}")
    return 1 if fmt in (1, 3) else 2


def decode_tensors(header, payload):
    """name -> np.float32 array shaped by dims, in table order (a dict keeps it)."""
    out = {}
    layout = tensor_layout(header)
    for t in header.get("tensors", []):
        dims = tuple(t["dims"])
        n = int(np.prod(dims, dtype=np.int64)) if dims else 1
        if layout == 1:
            if t["count"] != n:
                raise FormatError(f"{t['name']}: count {t['count']} is not the product of {dims}")
            start = 4 * t["offset"]
            raw = payload[start:start + 4 * n]
            if len(raw) != 4 * n:
                raise FormatError(f"{t['name']}: past the end")
            values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            raw = payload[t["offset"]:t["offset"] + t["bytes"]]
            if len(raw) != t["bytes"]:
                raise FormatError(f"{t['name']}: past the end")
            enc = t["encoding"]
            if enc == "f32":
                if len(raw) != 4 * n:
                    raise FormatError(f"{t['name']}: wrong size")
                values = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            elif enc == "s8":
                if len(raw) != n or len(t["scales"]) != dims[0]:
                    raise FormatError(f"{t['name']}: wrong size or scales")
                q = np.frombuffer(raw, dtype=np.int8).astype(np.float32)
                scales = f32(t["scales"])
                per = n // dims[0]
                values = (q.reshape(dims[0], per) * scales[:, None]).astype(np.float32).reshape(-1)
            elif enc == "bitmask":
                mask_bytes = (n + 7) // 8
                bits = np.unpackbits(np.frombuffer(raw[:mask_bytes], dtype=np.uint8), bitorder="little")[:n]
                nonzero = np.frombuffer(raw[mask_bytes:], dtype="<f4")
                if len(raw) != mask_bytes + 4 * int(bits.sum()):
                    raise FormatError(f"{t['name']}: bitmask size")
                values = np.zeros(n, dtype=np.float32)
                values[bits.astype(bool)] = nonzero
            else:
                raise FormatError(f"{t['name']}: unknown encoding {enc}")
        out[t["name"]] = values.reshape(dims)
    return out


# ------------------------------------------------------------ the network

ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu")


def parse_spec(spec):
    layers = []
    for token in spec.split():
        name, _, rest = token.partition("(")
        args, opts = [], {}
        if rest:
            for item in rest.rstrip(")").split(","):
                item = item.strip()
                if not item:
                    continue
                if "=" in item:
                    k, v = item.split("=", 1)
                    opts[k.strip()] = float(v)
                else:
                    args.append(float(item))
        layers.append((name, args, opts))
    return layers


def build_chain(spec, input_shape):
    """The built layers, numbered as docs/STORE.md says: a list of dicts."""
    spec_layers = parse_spec(spec)
    chain, shape = [], list(input_shape)
    for i, (name, args, opts) in enumerate(spec_layers):
        prev = spec_layers[i - 1][0] if i > 0 else None
        if name in ("relu", "tanh", "sigmoid") and prev in ("dense", "conv"):
            continue  # fused into the previous layer
        if name == "flatten" and len(shape) == 1:
            continue
        if name == "dense" and len(shape) == 3:
            chain.append({"kind": "flatten", "index": len(chain), "in": shape})
            shape = [int(np.prod(shape))]
        layer = {"kind": name, "index": len(chain), "in": shape, "args": args, "opts": opts, "act": None}
        if name in ("dense", "conv") and i + 1 < len(spec_layers) and spec_layers[i + 1][0] in ("relu", "tanh", "sigmoid"):
            layer["act"] = spec_layers[i + 1][0]
        if name == "dense":
            shape = [int(args[0])]
        elif name == "conv":
            o, k = int(args[0]), int(args[1])
            s, p = int(opts.get("stride", 1)), int(opts.get("pad", 0))
            shape = [o, (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
        elif name in ("maxpool", "avgpool"):
            k = int(args[0])
            s = int(opts.get("stride", k))
            shape = [shape[0], (shape[1] - k) // s + 1, (shape[2] - k) // s + 1]
        elif name == "flatten":
            shape = [int(np.prod(shape))]
        elif name == "periodic":
            layer["k"] = int(args[0]) if args else 16  # K frequencies, 16 when not written
            shape = [shape[0] * 2 * layer["k"]]
        elif name == "ple":
            layer["t"] = int(args[0]) if args else 16  # T bins, 16 when not written
            shape = [shape[0] * layer["t"]]
        elif name == "ensemble":
            layer["k"] = int(args[0]) if args else 32  # K members, 32 when not written
        layer["out"] = shape
        chain.append(layer)
    return chain


def member_heads(chain):
    """K when the chain's last dense layer follows an ensemble(K): its members' own layers."""
    dense = [i for i, L in enumerate(chain) if L["kind"] in ("dense", "conv")]
    ensemble = [i for i, L in enumerate(chain) if L["kind"] == "ensemble"]
    if dense and ensemble and ensemble[0] < dense[-1] and chain[dense[-1]]["kind"] == "dense":
        return chain[ensemble[0]]["k"], chain[dense[-1]]["index"]
    return 1, None


def expected_tensors(chain):
    params, buffers = [], []
    heads, head_index = member_heads(chain)
    for L in chain:
        k, kind, shape = L["index"], L["kind"], L["in"]
        if kind == "dense" and k == head_index:
            o = int(L["args"][0])
            params += [(f"{k}.dense.weight", (heads, o, shape[0])), (f"{k}.dense.bias", (heads, o))]
        elif kind == "dense":
            params += [(f"{k}.dense.weight", (int(L["args"][0]), shape[0])), (f"{k}.dense.bias", (int(L["args"][0]),))]
        elif kind == "conv":
            o, kk = int(L["args"][0]), int(L["args"][1])
            params += [(f"{k}.conv.weight", (o, shape[0], kk, kk)), (f"{k}.conv.bias", (o,))]
        elif kind in ("batchnorm", "layernorm"):
            c = (shape[0],) if kind == "batchnorm" else (shape[-1],)
            params += [(f"{k}.{kind}.scale", c), (f"{k}.{kind}.shift", c)]
            if kind == "batchnorm":
                buffers += [(f"{k}.batchnorm.running_mean", c), (f"{k}.batchnorm.running_var", c)]
        elif kind == "periodic":
            params += [(f"{k}.periodic.frequencies", (shape[0], L["k"]))]
        elif kind == "ple":
            buffers += [(f"{k}.ple.edges", (shape[0], L["t"] + 1))]
        elif kind == "ensemble":
            params += [(f"{k}.ensemble.scale", (L["k"], shape[0]))]
    return params + buffers


def activation(name, x):
    if name is None:
        return x
    if name == "relu":
        return np.maximum(x, np.float32(0))
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    if name == "gelu":
        erf = np.vectorize(math.erf)
        return (0.5 * x * (1 + erf(x.astype(np.float64) / math.sqrt(2)))).astype(np.float32)
    raise FormatError(f"activation {name}")


def conv_im2col(x, k, s, p):
    """(N, C, H, W) -> patches (N, Ho, Wo, C*K*K) in (c, u, v) order."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    cols = np.empty((n, ho, wo, c, k, k), dtype=x.dtype)
    for u in range(k):
        for v in range(k):
            cols[:, :, :, :, u, v] = xp[:, :, u:u + s * ho:s, v:v + s * wo:s].transpose(0, 2, 3, 1)
    return cols.reshape(n, ho, wo, c * k * k), ho, wo


def pool(x, kind, k, s):
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    windows = np.stack([x[:, :, u:u + s * ho:s, v:v + s * wo:s] for u in range(k) for v in range(k)])
    return windows.max(axis=0) if kind == "maxpool" else windows.mean(axis=0, dtype=np.float64).astype(x.dtype)


def quantize(v, scale, unsigned):
    lo, hi = (0, 255) if unsigned else (-128, 127)
    return np.clip(np.rint(v.astype(np.float64) / scale), lo, hi)


def forward(header, tensors, x):
    """Raw outputs (rows, outputs) for transformed rows x (rows, *input_shape)."""
    chain = build_chain(header["layers"], header["input_shape"])
    int8 = header.get("precision") == "int8"
    scales = header.get("activation_scales", {})
    weighted = [L for L in chain if L["kind"] in ("dense", "conv")]
    last = weighted[-1]["index"] if weighted else None
    members = 1  # an ensemble layer's K: rows a sample from it on
    h = x.astype(np.float32)
    q_scale = None  # int8: the scale of h when it holds integers
    for L in chain:
        kind = L["kind"]
        if kind in ("dense", "conv"):
            prefix = f"{L['index']}.{kind}"
            W, b = tensors[prefix + ".weight"], tensors[prefix + ".bias"]
            if int8:
                t = next(t for t in header["tensors"] if t["name"] == prefix + ".weight")
                sw = f32(t["scales"])
                qw = np.round(W.reshape(W.shape[0], -1).astype(np.float64) / sw[:, None].astype(np.float64))
                if q_scale is None:
                    s_in = np.float32(scales[prefix]["input"])
                    hq = quantize(h, s_in, False)
                else:
                    s_in, hq = q_scale, h
                f32_out = L["index"] == last or L["act"] in ("tanh", "sigmoid")
                s_out = np.float32(1) if f32_out else np.float32(scales[prefix]["output"])
                acc_scale = (s_in * sw).astype(np.float32)
                bias = (b / acc_scale).astype(np.float32)
                if kind == "dense":
                    acc = hq.reshape(hq.shape[0], -1) @ qw.T
                    z = (acc_scale / s_out).astype(np.float32) * (acc + bias).astype(np.float32)
                else:
                    k, s, p = int(L["args"][1]), int(L["opts"].get("stride", 1)), int(L["opts"].get("pad", 0))
                    cols, ho, wo = conv_im2col(hq, k, s, p)
                    acc = cols @ qw.T  # (N, Ho, Wo, O)
                    z = ((acc_scale / s_out).astype(np.float32) * (acc + bias).astype(np.float32)).transpose(0, 3, 1, 2)
                z = activation(L["act"], z.astype(np.float32))
                if f32_out:
                    h, q_scale = z.astype(np.float32), None
                else:  # z is already in units of s_out
                    h, q_scale = quantize(z, np.float32(1), L["act"] == "relu"), s_out
                continue
            if kind == "dense" and W.ndim == 3:
                # The members' own layers: member i's rows (n·K + i) by W[i], b[i].
                g = h.reshape(-1, W.shape[0], W.shape[2]).astype(np.float64)
                z = (np.einsum("nki,koi->nko", g, W.astype(np.float64)) + b).reshape(-1, W.shape[1])
            elif kind == "dense":
                z = h.reshape(h.shape[0], -1).astype(np.float64) @ W.astype(np.float64).T + b
            else:
                k, s, p = int(L["args"][1]), int(L["opts"].get("stride", 1)), int(L["opts"].get("pad", 0))
                cols, ho, wo = conv_im2col(h.astype(np.float64), k, s, p)
                z = (cols @ W.reshape(W.shape[0], -1).astype(np.float64).T + b).transpose(0, 3, 1, 2)
            h = activation(L["act"], z.astype(np.float32))
        elif kind in ("maxpool", "avgpool"):
            k = int(L["args"][0])
            h = pool(h, kind, k, int(L["opts"].get("stride", k)))
            if q_scale is not None and kind == "avgpool":
                h = np.rint(h)
        elif kind == "flatten":
            h = h.reshape(h.shape[0], -1)
        elif kind in ACTIVATIONS:
            if q_scale is not None:
                h, q_scale = (h * q_scale).astype(np.float32), None
            h = activation(kind, h)
        elif kind == "dropout":
            pass
        elif kind == "batchnorm":
            g, beta = tensors[f"{L['index']}.batchnorm.scale"], tensors[f"{L['index']}.batchnorm.shift"]
            mu, var = tensors[f"{L['index']}.batchnorm.running_mean"], tensors[f"{L['index']}.batchnorm.running_var"]
            shape = (1, -1, 1, 1) if h.ndim == 4 else (1, -1)
            h = (g.reshape(shape) * (h - mu.reshape(shape)) / np.sqrt(var.reshape(shape) + np.float32(1e-5))
                 + beta.reshape(shape)).astype(np.float32)
        elif kind == "layernorm":
            g, beta = tensors[f"{L['index']}.layernorm.scale"], tensors[f"{L['index']}.layernorm.shift"]
            mu = h.mean(axis=1, keepdims=True, dtype=np.float64)
            var = ((h - mu) ** 2).mean(axis=1, keepdims=True)
            h = (g * (h - mu) / np.sqrt(var + 1e-5) + beta).astype(np.float32)
        elif kind == "periodic":
            # θ = w·x in fp32 with w = 2π·c rounded to fp32; per feature its
            # K sines, then its K cosines.
            c = tensors[f"{L['index']}.periodic.frequencies"]
            w = (2 * np.pi * c.astype(np.float64)).astype(np.float32)
            theta = (h[:, :, None] * w[None, :, :]).astype(np.float64)
            h = np.concatenate([np.sin(theta), np.cos(theta)], axis=2).reshape(h.shape[0], -1).astype(np.float32)
        elif kind == "ple":
            # Per feature f its T bins between edges b[f][0..T]: bin t is
            # (x − b[t])·(1/w) in fp32 (w = b[t+1] − b[t], 1/w rounded to
            # fp32), clamped to [0, 1] except below for t = 0 and above for
            # the last used bin (b[t+1] == b[T]); 0 where w == 0.
            b = tensors[f"{L['index']}.ple.edges"]
            t = L["t"]
            lower, upper = b[:, :t], b[:, 1:]
            width = (upper - lower).astype(np.float32)
            used = width > 0
            inverse = np.where(used, np.float32(1) / np.where(used, width, np.float32(1)), np.float32(0)).astype(np.float32)
            z = ((h[:, :, None] - lower[None]).astype(np.float32) * inverse[None]).astype(np.float32)
            lo = np.full(lower.shape, np.float32(0))
            lo[:, 0] = -np.inf
            hi = np.where(upper == b[:, t:t + 1], np.float32(np.inf), np.float32(1))
            h = np.where(used[None], np.minimum(np.maximum(z, lo[None]), hi[None]), np.float32(0))
            h = h.reshape(h.shape[0], -1).astype(np.float32)
        elif kind == "ensemble":
            # Each sample becomes its K members' rows (member i of sample n at
            # row n·K + i), scaled by r (K, F) in fp32.
            r = tensors[f"{L['index']}.ensemble.scale"]
            members = L["k"]
            h = (h[:, None, :] * r[None, :, :]).reshape(-1, h.shape[1]).astype(np.float32)
        else:
            raise FormatError(f"layer {kind}")
    if members > 1:
        # The members' mean: their fp32 sum in member order, divided by K.
        grouped = h.reshape(-1, members, h.shape[1])
        total = grouped[:, 0, :].copy()
        for i in range(1, members):
            total = (total + grouped[:, i, :]).astype(np.float32)
        h = (total / np.float32(members)).astype(np.float32)
    return h.reshape(h.shape[0], -1).astype(np.float32)


def loss_predict(loss, y):
    y = y.astype(np.float64)
    if loss == "softmax_ce":
        e = np.exp(y - y.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if loss == "bce":
        p = 1 / (1 + np.exp(-y[:, 0]))
        return np.stack([1 - p, p], axis=1)
    return y


def linear_predict(lin, x):
    w = np.asarray(lin["weights"], dtype=np.float64).reshape(-1, lin["inputs"] + 1)
    s = x.astype(np.float64) @ w[:, :-1].T + w[:, -1]
    if not lin["classification"]:
        return s
    sig = 1 / (1 + np.exp(-s))
    if lin["classes"] == 2:
        return np.stack([1 - sig[:, 0], sig[:, 0]], axis=1)
    return sig / sig.sum(axis=1, keepdims=True)


# ------------------------------------------------------ features and labels

MISSING = {"", "na", "n/a", "nan", "null", "none", "?"}


def one_hot_width(c):
    """Output slots of a one-hot column: the dictionary, or the slots' count."""
    if "slots" not in c:
        return len(c["one_hot"])
    return max(c["slots"] + [-1]) + 1


def expand_datetime(c, v):
    """The documented datetime expansion of one value (days since 1970)."""
    d = c["datetime"]
    whole = math.floor(v)
    date = datetime.date(1970, 1, 1) + datetime.timedelta(days=whole)
    leap = date.year % 4 == 0 and (date.year % 100 != 0 or date.year % 400 == 0)
    day_of_year = date.timetuple().tm_yday - 1
    tau = 2 * math.pi
    out = [(date.year - d["year_mean"]) / d["year_scale"],
           math.sin(tau * (date.month - 1) / 12), math.cos(tau * (date.month - 1) / 12),
           math.sin(tau * date.weekday() / 7), math.cos(tau * date.weekday() / 7),
           math.sin(tau * day_of_year / (366 if leap else 365)), math.cos(tau * day_of_year / (366 if leap else 365))]
    if d["hour"]:
        out += [math.sin(tau * (v - whole)), math.cos(tau * (v - whole))]
    out.append((v - d["elapsed_mean"]) / d["elapsed_scale"])
    return out


def transform(features, raw):
    """raw: (rows, input width) floats in the store's layout -> network input (rows, width)."""
    out = []
    at = 0
    for c in features["columns"]:
        w = c["width"]
        if "one_hot" in c:
            levels = len(c["one_hot"])
            slots = c.get("slots", list(range(levels)))
            k = one_hot_width(c)
            codes = raw[:, at]
            block = np.zeros((raw.shape[0], k), dtype=np.float32)
            for r, code in enumerate(codes):
                if math.isnan(code):
                    continue
                slot = slots[int(code)] if code >= 0 and code == int(code) and code < levels else -1
                if slot < 0 and c.get("other"):
                    slot = k - 1  # unseen: the other slot
                if slot >= 0:
                    block[r, slot] = 1
            out.append(block)
            at += 1
        elif "datetime" in c:
            k = 10 if c["datetime"]["hour"] else 8
            block = np.zeros((raw.shape[0], k), dtype=np.float32)
            for r, v in enumerate(raw[:, at]):
                if not math.isnan(v):
                    block[r] = np.array(expand_datetime(c, float(np.float32(v))), dtype=np.float32)
            out.append(block)
            at += 1
        elif "robust" in c:
            # Robust scaling: (x - median) / spread in float32, then the
            # smooth clip z / sqrt(1 + (z * (1/3))^2), NaN -> 0.
            x = raw[:, at:at + 1].astype(np.float32)
            r = c["robust"]
            med, inv = np.float32(r["median"]), np.float32(1.0 / r["spread"])
            z = ((x - med).astype(np.float32) * inv).astype(np.float32)
            z[np.isnan(x)] = 0
            t = (z * np.float32(1.0 / 3.0)).astype(np.float32)
            out.append((z / np.sqrt((np.float32(1) + t * t).astype(np.float32))).astype(np.float32))
            at += 1
        else:
            x = raw[:, at:at + w].astype(np.float32)
            mean, inv = np.float32(c["mean"]), np.float32(1.0 / c["scale"])
            y = ((x - mean).astype(np.float32) * inv).astype(np.float32)
            y[np.isnan(x)] = 0
            out.append(y)
            at += w
    return np.concatenate(out, axis=1)


def days_from_text(cell):
    """An ISO date or date-time cell (YYYY-MM-DD[ HH:MM[:SS]], 'T' or ' ') as days since 1970."""
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            t = datetime.datetime.strptime(cell, fmt)
        except ValueError:
            continue
        return (t - datetime.datetime(1970, 1, 1)).total_seconds() / 86400
    raise FormatError(f"{cell!r}: not an ISO date")


def raw_rows_from_csv(features, path, delimiter=","):
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter=delimiter))
    names, body = rows[0], [r for r in rows[1:] if r]
    index = {n.strip(): i for i, n in enumerate(names)}
    raw = np.zeros((len(body), sum(1 if "one_hot" in c else c["width"] for c in features["columns"])))
    at = 0
    for c in features["columns"]:
        col = index[c["column"]]  # a left-out column ("excluded") is not read at all
        for r, row in enumerate(body):
            cell = row[col].strip()
            if "one_hot" in c:
                raw[r, at] = c["one_hot"].index(cell) if cell in c["one_hot"] else (
                    math.nan if cell.lower() in MISSING else len(c["one_hot"]))
            elif "datetime" in c:
                raw[r, at] = math.nan if cell.lower() in MISSING else np.float32(days_from_text(cell))
            else:
                raw[r, at] = math.nan if cell.lower() in MISSING else float(cell)
        at += 1 if "one_hot" in c else c["width"]
    return raw


def temperature(header):
    """A calibrated classifier's temperature T (header "temperature"; 1 when absent)."""
    t = header.get("temperature", 1.0)
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not (0.01 <= t <= 100):
        raise FormatError(f"temperature {t!r}")
    return float(t)


def predictions(header, tensors, x):
    """Class probabilities (rows x classes), or the standardized value: a
    calibrated model's class probabilities are softmax(z / T) of a network's
    logits z, softmax(log p / T) of a linear model's probabilities p."""
    t = temperature(header)
    if header["kind"] == "linear":
        p = linear_predict(header["linear"], x)
        if t == 1 or not header["linear"]["classification"]:
            return p
        s = np.log(np.maximum(p, np.finfo(np.float32).tiny)) / t
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    y = forward(header, tensors, x.reshape([x.shape[0]] + list(header["input_shape"])))
    if t != 1:
        if header["loss"] not in ("softmax_ce", "bce"):
            raise FormatError("a temperature on a regression model")
        y = y.astype(np.float64) / t
    return loss_predict(header["loss"], y)


# --------------------------------------------------------------- the hash

def frame_tensor(h, name, dtype, dims, values):
    """One tensor of the weights hash: name, dtype, dims, values, each length-prefixed."""
    def text(t):
        h.update(struct.pack("<Q", len(t)) + t)
    text(name.encode())
    text(dtype.encode())
    h.update(struct.pack("<Q", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims))
    raw = values.tobytes()
    h.update(struct.pack("<Q", len(raw)) + raw)


def weights_hash(header, tensors, payload):
    """weights_hash by the rule of the model's format (3 and 4; 1 and 2: legacy_weights_hash)."""
    if header["format"] in (1, 2):
        return legacy_weights_hash(header, tensors, payload)
    h = hashlib.blake2b(digest_size=32)
    if header["kind"] == "ensemble":
        # The weights, then each member: its kind's name, then its own tensors.
        w = np.asarray([m["weight"] for m in header["members"]], dtype="<f8")
        frame_tensor(h, "ensemble.weights", "f64", [len(w)], w)
        for member, member_payload in ensemble_members(header, payload):
            kind = member["kind"].encode()
            frame_tensor(h, "ensemble.member", "u8", [len(kind)], np.frombuffer(kind, dtype=np.uint8))
            frame_kind(h, member, decode_tensors(member, member_payload), member_payload)
    else:
        frame_kind(h, header, tensors, payload)
    return h.hexdigest()


def frame_kind(h, header, tensors, payload):
    """A network, linear or tree model's own part of the weights hash."""
    if header["kind"] == "linear":
        w = np.asarray(header["linear"]["weights"], dtype="<f8")
        frame_tensor(h, "linear.weights", "f64", [len(w)], w)
    elif header["kind"] == "trees":
        frame_tensor(h, "trees.booster", "u8", [len(payload)], np.frombuffer(payload, dtype=np.uint8))
    elif header["kind"] == "network":
        for name, v in tensors.items():
            # decode_tensors gives +0.0 for a bitmask's clear bits, as the document's decoding does.
            frame_tensor(h, name, "f32", list(v.shape), v.astype("<f4"))
    else:
        raise FormatError(f"model kind {header['kind']!r}")


def ensemble_members(header, payload):
    """An ensemble's members as (header, payload) pairs: each member's header
    is the ensemble's common fields with the member's kind, loss, outputs and
    own fields; its payload the bytes at its offset (one after another, the
    last ending the payload)."""
    common = {k: v for k, v in header.items() if k not in ("kind", "members", "weights_hash", "threshold", "temperature")}
    out, end = [], 0
    members = header["members"]
    if not isinstance(members, list) or len(members) < 2:
        raise FormatError("an ensemble holds two or more members")
    if abs(sum(m["weight"] for m in members) - 1) > 1e-9 or any(not 0 < m["weight"] <= 1 for m in members):
        raise FormatError("ensemble weights")
    for m in members:
        if m["kind"] not in ("network", "linear", "trees"):
            raise FormatError(f"ensemble member kind {m['kind']!r}")
        if m["offset"] != end or m["offset"] + m["bytes"] > len(payload):
            raise FormatError("ensemble member bytes")
        end = m["offset"] + m["bytes"]
        member = dict(common, kind=m["kind"], loss=m["loss"], outputs=m["outputs"], **m["fields"])
        out.append((member, payload[m["offset"]:end]))
    if end != len(payload):
        raise FormatError("bytes past the ensemble's last member")
    return out


def legacy_weights_hash(header, tensors, payload):
    """The rules of formats 1 and 2 (the document's note), for models stored before format 3."""
    h = hashlib.blake2b(digest_size=32)
    if header["kind"] == "trees":
        h.update(payload)
    elif header["kind"] == "linear":
        h.update(np.asarray(header["linear"]["weights"], dtype="<f8").tobytes())
    elif "compression" in header:
        for name, v in tensors.items():
            h.update(name.encode() + b"".join(b":%d" % d for d in v.shape) + b"\n")
            h.update(v.astype("<f4").tobytes())
    else:
        for name, v in tensors.items():
            h.update(name.encode() + b"\0")
            h.update(("{" + ", ".join(str(d) for d in v.shape) + "}").encode() + b"\0")
            h.update(v.astype("<f4").tobytes())
    return h.hexdigest()


# ----------------------------------------------------------- checkpoints

class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def str(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        if len(s) != n:
            raise FormatError("truncated string")
        self.pos += n
        return s.decode()


def read_state(state, fields=None):
    """The trainer state as a dict; `fields` collects (offset, size, label) for annotate."""
    r = Reader(state)
    note = (lambda start, label: fields.append((start, r.pos, label))) if fields is not None else (lambda *_: None)
    out = {}
    start = r.pos
    magic = state[:8]
    r.pos = 8
    if magic != b"ANNEALTS":
        raise FormatError("trainer state magic")
    note(start, "state magic ANNEALTS")
    for key, fmt in [("version", "I")]:
        start = r.pos
        out[key] = r.take(fmt)
        note(start, f"{key} = {out[key]}")
    start = r.pos
    out["fingerprint"] = r.str()
    note(start, "fingerprint: u64 length, then " + out["fingerprint"])
    for key, fmt in [("epoch", "q"), ("micro_index", "q"), ("step", "q"), ("micro_step", "Q"),
                     ("loss_sum", "d"), ("correct", "q"), ("count", "q"), ("best_metric", "d"),
                     ("bad_epochs", "q"), ("finished", "B"), ("stopped_early", "B"), ("last_lr", "d")]:
        start = r.pos
        out[key] = r.take(fmt)
        note(start, f"{key} = {out[key]}")
    start = r.pos
    count = r.take("Q")
    note(start, f"history count = {count}")
    out["history"] = []
    for _ in range(count):
        start = r.pos
        rec = dict(zip(["epoch", "steps", "train_loss", "train_accuracy", "has_validation", "val_loss",
                        "val_accuracy", "lr", "seconds"],
                       [r.take("q"), r.take("q"), r.take("d"), r.take("d"), r.take("B"), r.take("d"),
                        r.take("d"), r.take("d"), r.take("d")]))
        note(start, f"history record epoch {rec['epoch']}")
        out["history"].append(rec)
    start = r.pos
    count = r.take("Q")
    note(start, f"tensor count = {count}")
    out["tensors"] = {}
    for _ in range(count):
        start = r.pos
        name, dims = r.str(), r.str()
        n = r.take("Q")
        note(start, f"tensor {name}: name, dims {dims}, count {n}")
        start = r.pos
        values = np.frombuffer(state, dtype="<f4", count=n, offset=r.pos)
        r.pos += 4 * n
        note(start, f"  {name} values " + ", ".join(repr(float(v)) for v in values))
        shape = tuple(int(d) for d in dims.strip("{}").split(",") if d.strip())
        out["tensors"][name] = values.reshape(shape)
    out["best_epoch"], out["best"] = 0, []
    if out["version"] >= 2:
        # restore_best: the best epoch and its values, one per model tensor
        # (the parameters and state buffers: the first tensors above).
        start = r.pos
        out["best_epoch"] = r.take("q")
        note(start, f"best_epoch = {out['best_epoch']}")
        start = r.pos
        kept = r.take("Q")
        note(start, f"best values: count = {kept}")
        names = list(out["tensors"])
        if kept > len(names):
            raise FormatError("more best values than tensors")
        for i in range(kept):
            start = r.pos
            n = r.take("Q")
            if n != out["tensors"][names[i]].size:
                raise FormatError(f"best value {i} has {n} elements, tensor {names[i]} {out['tensors'][names[i]].size}")
            values = np.frombuffer(state, dtype="<f4", count=n, offset=r.pos)
            r.pos += 4 * n
            note(start, f"  best {names[i]}: count {n}")
            out["best"].append(values.reshape(out["tensors"][names[i]].shape))
    elif out["version"] != 1:
        raise FormatError(f"trainer state version {out['version']}")
    if r.pos != len(state):
        raise FormatError("trailing bytes after the trainer state")
    return out


# --------------------------------------------------------------- commands

def load_model(path):
    header, tensors, _ = load_model_payload(path)
    return header, tensors


def load_model_payload(path):
    with open(path, "rb") as f:
        data = f.read()
    header, payload, _ = unframe(data, b"ANMODEL1")
    return header, decode_tensors(header, payload), payload


def cmd_info(args):
    header, tensors = load_model(args.model)
    chain = build_chain(header["layers"], header["input_shape"]) if header["kind"] == "network" else []
    want = expected_tensors(chain)
    got = [(n, tuple(v.shape)) for n, v in tensors.items()]
    if header["kind"] == "network" and want != got:
        raise FormatError(f"tensor table {got} is not what the layers build: {want}")
    print(json.dumps({"format": header["format"], "kind": header["kind"], "loss": header["loss"],
                      "precision": header.get("precision"), "layers": [
                          f"{L['index']} {L['kind']}" + (f" {L['act']}" if L.get("act") else "") for L in chain],
                      "tensors": [{"name": n, "dims": list(s)} for n, s in got]}))


def number_text(v):
    return f"{v:.7g}"


def decode_value(labels, v):
    """A regression model's output in the target's own units (float64): v *
    scale + mean, and for a log target expm1 of that plus the shift."""
    if "log_target" in labels:
        t = labels["log_target"]
        return math.expm1(v * t["scale"] + t["mean"]) + t["shift"]
    return v * labels["scale"] + labels["mean"]


def cmd_predict(args):
    header, tensors = load_model(args.model)
    if args.csv:
        raw = raw_rows_from_csv(header["features"], args.csv, "\t" if args.csv.endswith(".tsv") else ",")
    else:
        width = sum(c["width"] for c in header["features"]["columns"])
        raw = np.fromfile(args.raw, dtype="<f4").reshape(-1, width).astype(np.float64)
    x = transform(header["features"], raw)
    p = predictions(header, tensors, x)
    labels = header["labels"]
    if args.json:
        print(json.dumps(p.tolist()))
        return
    out = ["row,prediction" + ("".join(f",p_{c}" for c in labels["classes"]) if labels["classification"] else "")]
    # A binary model's decision threshold (header "threshold"): class 1 when
    # P(class 1) > threshold; without one, the most probable class.
    threshold = header.get("threshold")
    for r in range(p.shape[0]):
        if labels["classification"]:
            k = int(p[r, 1] > threshold) if threshold is not None and p.shape[1] == 2 else int(np.argmax(p[r]))
            out.append(f"{r + 1},{labels['classes'][k]}," + ",".join(repr(float(v)) for v in p[r]))
        else:
            out.append(f"{r + 1},{repr(decode_value(labels, float(p[r, 0])))}")
    print("\n".join(out))


def cmd_hash(args):
    header, tensors, payload = load_model_payload(args.model)
    mine = weights_hash(header, tensors, payload)
    print(mine)
    if mine != header["weights_hash"]:
        print(f"weights_hash mismatch: header {header['weights_hash']}", file=sys.stderr)
        sys.exit(1)


def cmd_checkpoint(args):
    with open(args.checkpoint, "rb") as f:
        data = f.read()
    header, state, _ = unframe(data, b"ANCKPT01")
    s = read_state(state)
    if args.tensors_out:
        np.savez(args.tensors_out, **s["tensors"])
    s["tensors"] = [{"name": n, "dims": list(v.shape)} for n, v in s["tensors"].items()]
    print(json.dumps({"header": {k: header[k] for k in ("run", "step")}, "state": s}))


def hex_lines(data, start, end, label, base):
    lines = []
    for at in range(start, end, 16):
        chunk = data[at:min(at + 16, end)]
        text = " ".join(f"{b:02x}" for b in chunk)
        lines.append(f"{at - base:04x}  {text:<47}" + (f"  # {label}" if at == start else ""))
    return lines


def cmd_annotate(args):
    with open(args.blob, "rb") as f:
        data = f.read()
    magic = data[:8]
    header, payload, body = unframe(data, magic)
    n = body - 16
    lines = [f"vector {args.name}",
             f"magic   {' '.join(f'{b:02x}' for b in magic)}  # {magic.decode()}",
             f"length  {' '.join(f'{b:02x}' for b in data[8:16])}  # n = {n}",
             ]
    text = data[16:body].decode()
    lines += ["header " + text[i:i + 96] for i in range(0, len(text), 96)]
    if magic == b"ANMODEL1":
        lines.append(f"payload ({len(payload)} bytes; offsets from its start)")
        spans = []
        layout = tensor_layout(header)
        tensors = decode_tensors(header, payload)
        for t in header.get("tensors", []):
            v = tensors[t["name"]].reshape(-1)
            if layout == 1:
                start, size, enc = 4 * t["offset"], 4 * t["count"], "f32"
            else:
                start, size, enc = t["offset"], t["bytes"], t["encoding"]
            spans.append((start, start + size,
                          f"{t['name']} {enc} {t['dims']}: " + ", ".join(repr(float(x)) for x in v)))
        for start, end, label in spans:
            lines += hex_lines(payload, start, end, label, 0)
    else:
        lines.append(f"payload ({len(payload)} bytes of trainer state; offsets from its start)")
        fields = []
        read_state(payload, fields)
        for start, end, label in fields:
            lines += hex_lines(payload, start, end, label, 0)
    print("\n".join(line.rstrip() for line in lines))


def cmd_blob(args):
    if args.model:
        data = model_blob(args.store, args.model)
    else:
        data = checkpoint_blob(args.store, args.checkpoint)
    with open(args.o, "wb") as f:
        f.write(data)


def cmd_stream(args):
    with open(args.o, "wb") as f:
        f.write(dataset_stream(args.store, args.dataset, args.role))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("blob")
    s.add_argument("--store", required=True)
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--model")
    g.add_argument("--checkpoint")
    s.add_argument("-o", required=True)
    s.set_defaults(run=cmd_blob)
    s = sub.add_parser("stream")
    s.add_argument("--store", required=True)
    s.add_argument("--dataset", required=True)
    s.add_argument("--role", required=True)
    s.add_argument("-o", required=True)
    s.set_defaults(run=cmd_stream)
    s = sub.add_parser("info")
    s.add_argument("model")
    s.set_defaults(run=cmd_info)
    s = sub.add_parser("predict")
    s.add_argument("model")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--csv")
    g.add_argument("--raw")
    s.add_argument("--json", action="store_true", help="probabilities (or standardized values) as a JSON array")
    s.set_defaults(run=cmd_predict)
    s = sub.add_parser("hash")
    s.add_argument("model")
    s.set_defaults(run=cmd_hash)
    s = sub.add_parser("checkpoint")
    s.add_argument("checkpoint")
    s.add_argument("--tensors-out", help="also write the tensors to this .npz")
    s.set_defaults(run=cmd_checkpoint)
    s = sub.add_parser("annotate")
    s.add_argument("blob")
    s.add_argument("name")
    s.set_defaults(run=cmd_annotate)
    args = p.parse_args()
    try:
        args.run(args)
    except FormatError as e:
        print(f"read_model: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
