"""Helpers of onnx_export_test (run with /usr/bin/python3, which has
Debian's python3-onnx and python3-numpy):

  check MODEL.onnx                       onnx.checker.check_model (full check)
  feeds MODEL.onnx CSV OUT.json          the model's inputs from a CSV file's columns
  image-feeds MODEL.onnx FEATURES DTYPE SPLIT OUT.json
                                         the test rows of exported raw streams
  compare-predict PREDICT.csv ORT.json MIN_AGREEMENT TOLERANCE LABEL
  compare-eval EVAL.json ORT.json LABELS SPLIT VALUES.json MAX_MOVED LABEL
  compare-reader READER.py MODEL.bin FEATURES DTYPE SPLIT ORT.json TOLERANCE LABEL

The inputs come from the model's metadata ("anneal.inputs"), parsed the way
`anneal data import` reads a CSV: empty, NA and NaN are missing; dates are
days since 1970-01-01 (the time of day as the fraction), as anneal stores
them (float32).
"""
import csv
import datetime
import json
import re
import sys

import numpy as np
import onnx

MISSING = {"", "NA", "NaN"}


def metadata(path):
    model = onnx.load(path)
    return model, {p.key: p.value for p in model.metadata_props}


def check(path):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ins = [(i.name, onnx.TensorProto.DataType.Name(i.type.tensor_type.elem_type)) for i in model.graph.input]
    outs = [o.name for o in model.graph.output]
    print(f"{path}: valid; opsets {[(o.domain or 'ai.onnx', o.version) for o in model.opset_import]}, "
          f"{len(ins)} inputs, outputs {outs}, {len(model.graph.node)} nodes")


DATE = re.compile(r"^(\d{4})[-/](\d{2})[-/](\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(\.\d+)?)?)?Z?$")


def days_since_1970(text):
    m = DATE.match(text)
    if not m:
        raise SystemExit(f"onnx_tool: cannot read the date '{text}'")
    y, mo, d, h, mi, s, frac = m.groups()
    day = (datetime.date(int(y), int(mo), int(d)) - datetime.date(1970, 1, 1)).days
    seconds = int(h or 0) * 3600.0 + int(mi or 0) * 60.0 + int(s or 0) + float(frac or 0)
    return float(np.float32(day + seconds / 86400.0))


def feeds(model_path, csv_path, out):
    _, meta = metadata(model_path)
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    result = {}
    for spec in json.loads(meta["anneal.inputs"]):
        name, kind = spec["name"], spec["kind"]
        col = header.index(name)
        cells = [r[col] for r in rows]
        if kind == "categorical":
            result[name] = {"type": "string", "dims": [len(cells)], "data": ["" if c in MISSING else c for c in cells]}
        elif kind == "datetime":
            result[name] = {"type": "float32", "dims": [len(cells)],
                            "data": [None if c in MISSING else days_since_1970(c) for c in cells]}
        elif kind == "numeric":
            result[name] = {"type": "float32", "dims": [len(cells)],
                            "data": [None if c in MISSING else float(np.float32(float(c))) for c in cells]}
        else:
            raise SystemExit(f"onnx_tool: input '{name}' is {kind}; a CSV has no such column")
    json.dump(result, open(out, "w"))


def test_rows(features, dtype, split, width):
    x = np.fromfile(features, dtype={"f32": "<f4", "u8": np.uint8}[dtype]).astype(np.float32).reshape(-1, width)
    test = np.fromfile(split, dtype=np.uint8) == 1
    return x[test], test


def image_feeds(model_path, features, dtype, split, out):
    _, meta = metadata(model_path)
    (spec,) = json.loads(meta["anneal.inputs"])
    shape = spec["shape"]
    x, _ = test_rows(features, dtype, split, int(np.prod(shape)))
    json.dump({spec["name"]: {"type": "float32", "dims": [len(x)] + shape, "data": x.ravel().tolist()}}, open(out, "w"))


def ort_outputs(path):
    o = json.load(open(path))
    probs = np.array(o["probabilities"]["data"], dtype=np.float64).reshape(o["probabilities"]["dims"])
    return o["label"]["data"], probs


def compare_predict(predict_csv, ort_json, min_agreement, tolerance, label):
    min_agreement, tolerance = float(min_agreement), float(tolerance)
    with open(predict_csv, newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    o = json.load(open(ort_json))
    if "value" in o:
        want = np.array([float(r[1]) for r in rows])
        got = np.array(o["value"]["data"], dtype=np.float64)
        diff = np.abs(got - want) / np.maximum(1.0, np.abs(want))
        print(f"{label}: {len(rows)} rows, max relative difference {diff.max():.3g}")
        sys.exit(0 if len(got) == len(want) and diff.max() <= tolerance else 1)
    labels, probs = ort_outputs(ort_json)
    want = np.array([[float(v) for v in r[2:]] for r in rows])
    if probs.shape != want.shape:
        raise SystemExit(f"{label}: ONNX Runtime gave probabilities {probs.shape}, anneal predict {want.shape}")
    agree = sum(a == r[1] for a, r in zip(labels, rows)) / len(rows)
    # predict writes 7 significant digits
    diff = float(np.abs(probs - want).max())
    print(f"{label}: {len(rows)} rows, class agreement {agree:.4f} "
          f"({sum(a != r[1] for a, r in zip(labels, rows))} differ), max |p_onnx - p_anneal| {diff:.3g}")
    sys.exit(0 if agree >= min_agreement and diff <= tolerance else 1)


def compare_eval(eval_json, ort_json, labels_bin, split_bin, max_moved, label):
    e = json.load(open(eval_json))
    classes = e["classes"]
    want = np.array(e["metrics"]["confusion"])
    truth = np.fromfile(labels_bin, dtype="<f4")[np.fromfile(split_bin, dtype=np.uint8) == 1]
    predicted, _ = ort_outputs(ort_json)
    confusion = np.zeros_like(want)
    for t, p in zip(truth, predicted):
        confusion[classes.index(f"{t:g}"), classes.index(p)] += 1
    moved = int(np.abs(confusion - want).sum()) // 2
    print(f"{label}: {len(truth)} test rows, ONNX accuracy {np.trace(confusion) / len(truth):.4f}, anneal eval "
          f"{np.trace(want) / len(truth):.4f}; {moved} rows in other cells of the confusion matrix")
    sys.exit(0 if moved <= int(max_moved) else 1)


def compare_reader(reader, model_bin, features, dtype, split, ort_json, tolerance, label):
    tolerance = float(tolerance)
    import importlib.util
    spec = importlib.util.spec_from_file_location("read_model", reader)
    rm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rm)
    header, tensors = rm.load_model(model_bin)
    width = int(np.prod(header["features"]["input_shape"]))
    x, _ = test_rows(features, dtype, split, width)
    want = np.asarray(rm.predictions(header, tensors, rm.transform(header["features"], x.astype(np.float64))))
    _, probs = ort_outputs(ort_json)
    diff = float(np.abs(probs - want).max())
    print(f"{label}: max |p_onnx - p_reader| {diff:.3g} over {len(x)} rows (tests/format/read_model.py)")
    sys.exit(0 if diff <= tolerance else 1)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"check": check, "feeds": feeds, "image-feeds": image_feeds, "compare-predict": compare_predict,
     "compare-eval": compare_eval, "compare-reader": compare_reader}[cmd](*args)
