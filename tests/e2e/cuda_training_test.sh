#!/bin/bash
# device = cuda end to end, where the CUDA backend is usable (a GPU, the
# plugin and its libraries); elsewhere the test is reported skipped (exit
# 77), saying why, and device_test.sh covers the refusal.
#
#   * kill -9 at a checkpoint of a cuda run, then --resume: the weights end
#     bitwise identical to the uninterrupted cuda run (which itself gives
#     the same weights twice: deterministic algorithms);
#   * a GPU-trained model evaluates on the CPU with the same predictions
#     (its confusion matrix is the CPU's, the differences counted) and
#     quantizes there; a killed GPU run resumes on the CPU and the reverse;
#   * Fashion-MNIST (when installed, or FMNIST_DIR): the MLP and the CNN of
#     docs/examples reach the CPU's test accuracy within 0.5 point after the
#     same epochs (MLP_EPOCHS, CNN_EPOCHS).
. "$E2E_LIB"

expect_rc 0 --json devices
usable=$(json_get '[d for d in j["devices"] if d["device"] == "cuda"][0]["usable"]')
if [ "$usable" != "True" ]; then
  echo "SKIP: cuda is not usable here: $(json_get '[d for d in j["devices"] if d["device"] == "cuda"][0]["reason"]')"
  exit 77
fi
expect_eq "$(json_get '[d["device"] for d in j["devices"] if d["auto"]]')" "['cuda']" "auto picks the GPU"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/r.ini" <<'INI'
name             = digits-gpu
dataset          = digits
layers           = dense(128) relu dropout(0.1) dense(64) relu dense(10)
lr               = 0.002
batch            = 16
epochs           = 12
seed             = 5
validation       = 0.1
device           = cuda
checkpoint_every = 50
INI

expect_rc 0 --json train "$WORK/r.ini"
want=$(json_get 'j["weights_hash"]')
expect_rc 0 --json train "$WORK/r.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "two cuda runs give the same weights"
expect_rc 0 --json model show digits-gpu@v1
expect_eq "$(json_get 'j["lineage"]["device"]')" "cuda" "lineage records the GPU"

# kill -9 at the 6th checkpoint's commit, then resume on the GPU.
ANNEAL_FAULT="checkpoint.committed@6=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" > /dev/null 2>&1
expect_eq "$?" "137" "the run was killed"
run_id=$(latest_run)
expect_rc 0 --json train --resume "$run_id"
expect_eq "$(json_get 'j["weights_hash"]')" "$want" "kill -9 and --resume give the uninterrupted weights"

# The GPU-trained model on the CPU: the same predictions.
# confusion CM_JSON_A CM_JSON_B: how many predictions at least differ.
eval_on() {  # MODEL DATA DEVICE: the confusion matrix (JSON) into $CM, the accuracy into $ACC
  expect_rc 0 --json eval "$1" "$2" --device "$3"
  ACC=$(json_get 'j["metrics"]["accuracy"]')
  CM=$(json_get 'json.dumps(j["metrics"]["confusion"])')
}
eval_on digits-gpu@v1 digits cuda
cm_gpu=$CM acc_gpu=$ACC
eval_on digits-gpu@v1 digits cpu
cm_cpu=$CM
expect_eq "$ACC" "$acc_gpu" "the GPU-trained model scores the same on the CPU"
expect_eq "$(confusion_diff "$cm_gpu" "$cm_cpu")" "0" "predictions that differ between the CPU and the GPU"
# int8 runs on the CPU backend: auto goes there, cuda is refused.
expect_rc 0 --json quantize digits-gpu@v1 --int8 --calib digits
expect_rc 0 --json model show digits-gpu@latest
int8_model=$(json_get 'j["ref"]')
expect_rc 0 --json eval "$int8_model" digits
expect_rc 2 eval "$int8_model" digits --device cuda
expect_contains "$ERR" "int8 models run on the CPU backend" "cuda refuses an int8 model, saying why"

# A checkpoint does not depend on the device: a killed GPU run goes on on
# the CPU, and a killed CPU run on the GPU; each records where it finished.
for pair in "cuda cpu" "cpu cuda"; do
  set -- $pair
  ANNEAL_FAULT="checkpoint.committed@4=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" --device "$1" > /dev/null 2>&1
  expect_eq "$?" "137" "a $1 run was killed"
  expect_rc 0 --json train --resume "$(latest_run)" --device "$2"
  expect_rc 0 --json model show digits-gpu@latest
  expect_eq "$(json_get 'j["lineage"]["device"]')" "$2" "a $1 run resumed on the $2"
done

# deterministic = false and tf32 = true: faster algorithms allowed, and the
# run says so and records both.
expect_rc 0 --json train "$WORK/r.ini" --set tf32=true --set deterministic=false --set name=digits-fast \
  --set checkpoint_every=0
expect_contains "$ERR" "deterministic = false: the cuda backend may use algorithms whose results vary" \
  "the run says its weights may not repeat"
expect_rc 0 --json model show digits-fast@v1
expect_eq "$(json_get 'j["lineage"]["deterministic"]')" "False" "the lineage records deterministic: false"
expect_contains "$(json_get 'j["lineage"]["config"]')" "tf32 = true" "the lineage records tf32"

# precision = bf16 on the GPU (fp32 master weights, bf16 activations):
# deterministic too, and its model evaluates on the CPU as on the GPU.
# A GPU older than Ampere refuses bf16 in one line (exit 2).
run --json train "$WORK/r.ini" --set precision=bf16 --set name=digits-bf16 --set checkpoint_every=0
if [ "$RC" = 2 ] && [[ "$ERR" == *"has no native bf16"* ]]; then
  echo "note: this GPU has no bf16: $ERR"
else
  expect_eq "$RC" "0" "train precision=bf16 on the GPU: $ERR"
  bf16_hash=$(json_get 'j["weights_hash"]')
  expect_rc 0 --json train "$WORK/r.ini" --set precision=bf16 --set name=digits-bf16 --set checkpoint_every=0
  expect_eq "$(json_get 'j["weights_hash"]')" "$bf16_hash" "two bf16 cuda runs give the same weights"
  eval_on digits-bf16@v1 digits cuda
  acc_gpu=$ACC
  eval_on digits-bf16@v1 digits cpu
  echo "digits bf16 on the GPU: accuracy $acc_gpu (on the CPU: $ACC)"
  python3 -c "import sys; sys.exit(0 if $acc_gpu > 0.9 else 1)" && pass || fail "bf16 on the GPU trained to $acc_gpu"
fi

# precision = fp16 (fp32 master weights, fp16 activations, a dynamic loss
# scale on the device): deterministic, every epoch records its skipped
# steps and loss scale, kill -9 and --resume restore the scale with the
# weights, and the model evaluates on the CPU (in fp32 there) about as on
# the GPU.
expect_rc 0 --json train "$WORK/r.ini" --set precision=fp16 --set name=digits-fp16
fp16_hash=$(json_get 'j["weights_hash"]')
expect_rc 0 --json train "$WORK/r.ini" --set precision=fp16 --set name=digits-fp16
expect_eq "$(json_get 'j["weights_hash"]')" "$fp16_hash" "two fp16 cuda runs give the same weights"
expect_rc 0 --json runs show "$(latest_run)"
expect_eq "$(json_get 'all("skipped_steps" in e and e["loss_scale"] >= 1 for e in j["epochs"])')" "True" \
  "every fp16 epoch records its skipped steps and loss scale"
echo "fp16 epochs: $(json_get '[(e["skipped_steps"], e["loss_scale"]) for e in j["epochs"]]')"
ANNEAL_FAULT="checkpoint.committed@6=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/r.ini" --set precision=fp16 \
  --set name=digits-fp16 > /dev/null 2>&1
expect_eq "$?" "137" "the fp16 run was killed"
expect_rc 2 train --resume "$(latest_run)" --device cpu
expect_contains "$ERR" "has no fp16 training" "an fp16 run does not resume on the CPU, saying why"
expect_rc 0 --json train --resume "$(latest_run)"
expect_eq "$(json_get 'j["weights_hash"]')" "$fp16_hash" "fp16: kill -9 and --resume give the uninterrupted weights"
expect_rc 0 --json model show digits-fp16@v1
expect_eq "$(json_get 'j["lineage"]["precision"]')" "fp16" "the lineage records fp16"
eval_on digits-fp16@v1 digits cuda
acc_gpu=$ACC cm_gpu=$CM
eval_on digits-fp16@v1 digits cpu
echo "digits fp16 on the GPU: accuracy $acc_gpu (evaluated on the CPU: $ACC;" \
  "$(confusion_diff "$cm_gpu" "$CM") predictions differ)"
python3 -c "import sys; sys.exit(0 if $acc_gpu > 0.9 and abs($acc_gpu - $ACC) <= 0.01 else 1)" && pass \
  || fail "fp16 on the GPU trained to $acc_gpu, $ACC on the CPU"

fm=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -e "$fm/train-images-idx3-ubyte.gz" ]; then
  echo "note: no Fashion-MNIST at $fm; the accuracy comparison is skipped"
  finish
fi
expect_rc 0 data import fmnist "$fm/train-images-idx3-ubyte.gz" --labels "$fm/train-labels-idx1-ubyte.gz" \
  --test "$fm/t10k-images-idx3-ubyte.gz" --test-labels "$fm/t10k-labels-idx1-ubyte.gz"
ROOT=$(cd "$(dirname "$E2E_LIB")/../.." && pwd)
for model in mlp cnn; do
  if [ "$model" = mlp ]; then epochs=${MLP_EPOCHS:-3}; else epochs=${CNN_EPOCHS:-2}; fi
  declare -A acc=()
  for device in cuda cpu; do
    expect_rc 0 --json train "$ROOT/docs/examples/fmnist-$model.ini" --device "$device" --set epochs="$epochs" \
      --set name="fm-$model-$device" --set checkpoint_every=0
    acc[$device]=$(json_get 'j["metrics"]["test_accuracy"]')
    echo "fmnist $model, $epochs epoch(s), $device: test accuracy ${acc[$device]}, $(json_get 'j["samples_per_s"]') samples/s"
  done
  gap=$(python3 -c "print(abs(${acc[cuda]} - ${acc[cpu]}) * 100)")
  if python3 -c "import sys; sys.exit(0 if $gap <= 0.5 else 1)"; then pass; else
    fail "fmnist $model: cuda ${acc[cuda]} vs cpu ${acc[cpu]}: $gap points apart"
  fi
  eval_on "fm-$model-cuda@v1" fmnist cuda
  cm_gpu=$CM
  eval_on "fm-$model-cuda@v1" fmnist cpu
  cm_cpu=$CM
  diff=$(confusion_diff "$cm_gpu" "$cm_cpu")
  echo "fmnist $model trained on the GPU: at least $diff of 10000 test predictions differ on the CPU"
  if [ "$diff" -le 5 ]; then pass; else fail "fmnist $model: $diff predictions differ between cuda and cpu"; fi
done
finish
