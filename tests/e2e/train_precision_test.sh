#!/bin/bash
# precision = bf16 lands within 1 point of fp32 test accuracy on digits; on a
# CPU without bf16 support (as oneDNN sees it: `anneal devices`, which
# ONEDNN_MAX_CPU_ISA lowers, not /proc/cpuinfo) it is refused up front with
# a clear error.
# precision = fp16 needs a GPU: the CPU backend refuses it the same way.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/d.ini" <<'INI'
name    = digits-mlp
dataset = digits
layers  = dense(128) relu dense(10)
lr      = 0.003
batch   = 32
epochs  = 10
seed    = 11
threads = 1
INI

expect_rc 0 --json train "$WORK/d.ini"
fp32=$(json_get 'j["metrics"]["test_accuracy"]')
fp32_hash=$(json_get 'j["weights_hash"]')
cpu_caps
if [ "$CPU_BF16" = 1 ]; then
  expect_rc 0 --json train "$WORK/d.ini" --set precision=bf16
  bf16=$(json_get 'j["metrics"]["test_accuracy"]')
  [ "$(json_get 'j["weights_hash"]')" != "$fp32_hash" ] && pass || fail "bf16 trained in bf16 (same weights as fp32)"
  python3 -c "import sys; sys.exit(0 if abs($bf16 - $fp32) <= 0.01 else 1)" && pass \
    || fail "bf16 test accuracy $bf16 is more than 1 point from fp32 $fp32"
  expect_rc 0 --json model show digits-mlp@v2
  expect_eq "$(json_get 'j["lineage"]["precision"]')" "bf16" "lineage records the precision"
  expect_rc 0 --json eval digits-mlp@v2 digits
  expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$bf16" "eval of the bf16 model matches the run"
else
  echo "the CPU lacks avx512_core_bf16 (oneDNN isa $CPU_ISA): checking that precision = bf16 is refused"
  expect_rc 2 train "$WORK/d.ini" --set precision=bf16
  expect_contains "$ERR" "bf16" "bf16 refused on this CPU"
  expect_eq "$(printf '%s\n' "$ERR" | grep -c '^anneal: ')" "1" "the refusal is one error line"
  expect_contains "$ERR" "anneal: precision bf16: the cpu backend has no native bf16 (on a CPU: AVX512_BF16 or AMX); use fp32" \
    "the refusal names what the CPU lacks"
  expect_rc 0 --json runs list
  expect_eq "$(json_get 'len(j["runs"])')" "1" "the refused run left nothing behind"
fi
expect_rc 0 --json runs list
runs_before=$(json_get 'len(j["runs"])')
expect_rc 2 train "$WORK/d.ini" --set precision=fp16 --device cpu
expect_contains "$ERR" "precision fp16: the cpu backend has no fp16 training" "fp16 refused on the CPU, saying why"
expect_rc 2 train "$WORK/d.ini" --set precision=fp17
expect_contains "$ERR" "fp16" "an unknown precision lists fp16 among the choices"
expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "$runs_before" "the refused runs left nothing behind"
finish
