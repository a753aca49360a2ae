#!/bin/bash
# `anneal model export --format onnx` of a model trained in precision = bf16
# (issue 18; split from onnx_export_test.sh, which covers every other kind):
# anneal computes in bf16 and the export runs the same weights in fp32, so
# ONNX Runtime's classes agree with `anneal predict` on >= 99% of the test
# rows and its probabilities within 0.01. The model has batchnorm,
# layernorm, tanh and sigmoid, and bce with one output; a second one two
# periodic embeddings; a third ple; a fourth an ensemble after a dense.
# Needs a CPU that trains bf16 (AVX512_BF16 or AMX, as oneDNN sees it);
# elsewhere it is skipped (77), naming the capability.
. "$E2E_LIB"
require_cpu_bf16
. "$(dirname "$E2E_LIB")/onnx/ort_lib.sh"

expect_rc 0 init
import_sales
cat >"$WORK/bf16.ini" <<'INI'
name      = sales-bf16
dataset   = sales
layers    = dense(32) batchnorm relu dense(16) layernorm tanh dense(8) sigmoid dense(1)
loss      = bce
precision = bf16
epochs    = 3
seed      = 2
threads   = 1
INI
expect_rc 0 train "$WORK/bf16.ini"
ort_vs_predict sales-bf16@v1 "$WORK/future.csv" 0.99 0.01 bf16-mlp
# The periodic embedding in bf16: the first one on the fp32 input, the
# second on the bf16 output of a dense (its values and gradients bf16).
cat >"$WORK/bf16-periodic.ini" <<'INI'
name      = sales-bf16-periodic
dataset   = sales
layers    = periodic(4) dense(16) relu periodic(2,sigma=0.5) dense(2)
precision = bf16
epochs    = 3
seed      = 3
threads   = 1
INI
expect_rc 0 train "$WORK/bf16-periodic.ini"
ort_vs_predict sales-bf16-periodic@v1 "$WORK/future.csv" 0.99 0.01 bf16-periodic
# ple in bf16: on the fp32 input (its output fp32, which the bf16 dense
# after it converts).
cat >"$WORK/bf16-ple.ini" <<'INI'
name      = sales-bf16-ple
dataset   = sales
layers    = ple(8) dense(16) relu dense(2)
precision = bf16
epochs    = 3
seed      = 3
threads   = 1
INI
expect_rc 0 train "$WORK/bf16-ple.ini"
ort_vs_predict sales-bf16-ple@v1 "$WORK/future.csv" 0.99 0.01 bf16-ple
# The ensemble in bf16, after a dense: its member rows, their gradients and
# the members' mean of the bf16 last layer all bf16.
cat >"$WORK/bf16-ensemble.ini" <<'INI'
name      = sales-bf16-ensemble
dataset   = sales
layers    = dense(16) relu ensemble(4) dense(16) relu dense(2)
precision = bf16
epochs    = 3
seed      = 3
threads   = 1
INI
expect_rc 0 train "$WORK/bf16-ensemble.ini"
ort_vs_predict sales-bf16-ensemble@v1 "$WORK/future.csv" 0.99 0.01 bf16-ensemble
ort_finish
