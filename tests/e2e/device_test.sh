#!/bin/bash
# --device and the config key `device` (the engine issue): auto and cpu
# train, evaluate and predict on the CPU; cuda where the CUDA backend is not
# usable (not built, not installed, or no GPU: `anneal devices` says which)
# is a one-line error with exit 2 that leaves the store as it was, and auto
# says in one line why it trains on the CPU; a misspelt device names the
# closest one. The run records the device and the CPU's instruction set,
# which `anneal devices` prints with what it gives (bf16, VNNI), lowered by
# ONEDNN_MAX_CPU_ISA. The anneal executable links no CUDA library; a plugin
# that is not one, or is damaged, is refused by name.
. "$E2E_LIB"

# What the registry says of cuda on this machine. Where it is usable (a GPU
# and the plugin), this test hides the plugin, so that what it checks (the
# CPU fallback and the refusals) holds; cuda_training_test.sh covers the GPU.
expect_rc 0 --json devices
if [ "$(json_get '[d for d in j["devices"] if d["device"] == "cuda"][0]["usable"]')" = "True" ]; then
  mkdir -p "$WORK/no-plugins"
  export ANNEAL_PLUGIN_DIR="$WORK/no-plugins"
  expect_rc 0 --json devices
fi
cuda_usable=$(json_get '[d for d in j["devices"] if d["device"] == "cuda"][0]["usable"]')
cuda_reason=$(json_get '[d for d in j["devices"] if d["device"] == "cuda"][0]["reason"]')
expect_eq "$(json_get '[d["device"] for d in j["devices"] if d["auto"]]')" "['cpu']" "auto picks the CPU here"
expect_eq "$cuda_usable" "False" "cuda is not usable without a GPU or without the plugin"
expect_rc 0 devices
expect_contains "$OUT" "auto picks this" "devices says what auto picks"

# The CPU as oneDNN sees it: its instruction set and what that gives, in
# text and JSON alike. ONEDNN_MAX_CPU_ISA=AVX2 makes any newer x86-64 CPU an
# AVX2 one: no bf16, no VNNI.
cpu_caps
[ -n "$CPU_ISA" ] && pass || fail "devices --json names the CPU's isa"
yes_no() { if [ "$1" = 1 ]; then echo yes; else echo no; fi; }
expect_contains "$OUT" "cpu: isa $CPU_ISA; bf16 $(yes_no "$CPU_BF16"); int8 vnni $(yes_no "$CPU_VNNI")" \
  "devices prints what --json says of the CPU"
case "$CPU_ISA" in
  avx2 | avx2_vnni | avx512_*) capped=avx2 ;;
  *) capped=$CPU_ISA ;;  # below AVX2 already: the cap changes nothing
esac
ONEDNN_MAX_CPU_ISA=AVX2 expect_rc 0 --json devices
expect_eq "$(json_get '[(d["isa"], d["bf16"], d["int8_vnni"]) for d in j["devices"] if d["device"] == "cpu"][0]')" \
  "('$capped', False, False)" "oneDNN capped at AVX2: its isa, no bf16, no VNNI"
ONEDNN_MAX_CPU_ISA=AVX2 expect_rc 0 devices
expect_contains "$OUT" "cpu: isa $capped; bf16 no; int8 vnni no" "devices prints the capped CPU"
if readelf -d "$ANNEAL" | grep NEEDED | grep -qiE 'cuda|cublas|cudnn|nccl'; then
  fail "anneal links a CUDA library: $(readelf -d "$ANNEAL" | grep NEEDED)"
else
  pass
fi

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/iris.ini" iris-mlp "epochs = 3"

# refused NAME MESSAGE ARGS...: exit 2, one line, the store untouched.
refused() {
  local name=$1 message=$2
  shift 2
  local before before_catalog
  before=$(store_state)
  before_catalog=$(catalog_dump)
  expect_rc 2 "$@"
  expect_contains "$ERR" "$message" "$name: message"
  expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "$name: one-line error"
  expect_eq "$(store_state)" "$before" "$name: store unchanged"
  expect_eq "$(catalog_dump)" "$before_catalog" "$name: catalog unchanged"
}

# cuda, not usable here, is refused before any run, saying why.
refused "train --device cuda" "--device: device cuda: $cuda_reason; use device cpu or auto" train "$WORK/iris.ini" --device cuda
refused "--set device=cuda" "--set device: device cuda: $cuda_reason" train "$WORK/iris.ini" --set device=cuda
iris_config "$WORK/cuda.ini" iris-cuda "device = cuda"
refused "config device = cuda" "cuda.ini:" train "$WORK/cuda.ini"
refused "train --device gpu" "unknown device 'gpu'" train "$WORK/iris.ini" --device gpu
refused "config device = cpus" "did you mean 'cpu'" train "$WORK/iris.ini" --set device=cpus

# auto and cpu train the same model bit for bit on this machine (auto is
# the CPU here), and the run records the device and its instruction set.
expect_rc 0 --json train "$WORK/iris.ini" --device cpu
cpu_hash=$(json_get 'j["weights_hash"]')
expect_rc 0 --json train "$WORK/iris.ini"
expect_eq "$(json_get 'j["weights_hash"]')" "$cpu_hash" "device auto trains what device cpu trains"
expect_contains "$ERR" "device auto: training on the cpu (cuda: $cuda_reason)" "auto says why it is on the CPU"
expect_eq "$(printf '%s\n' "$ERR" | grep -c 'device auto')" "1" "in one line"
expect_rc 0 --json model show iris-mlp@v2
expect_eq "$(json_get 'j["lineage"]["device"]')" "cpu" "lineage records the device"
json_get 'len(j["lineage"]["isa"]) > 0' | grep -q True && pass || fail "lineage records the ISA"
expect_contains "$(json_get 'j["lineage"]["config"]')" "device = auto" "the resolved config records device"
expect_eq "$(json_get 'j["lineage"]["isa"]')" "$CPU_ISA" "the lineage's ISA is the one devices prints"
ONEDNN_MAX_CPU_ISA=AVX2 expect_rc 0 --json train "$WORK/iris.ini" --device cpu
expect_rc 0 --json model show "$(json_get 'j["model"]')"
expect_eq "$(json_get 'j["lineage"]["isa"]')" "$capped" "a run under ONEDNN_MAX_CPU_ISA=AVX2 records that ISA"

# A run may go on on another device (a checkpoint is plain values): a
# killed run resumes with --device, which is recorded. Where cuda is not
# usable it is refused before anything changes; cpu resumes it, and on the
# device it started on the weights are the uninterrupted run's.
iris_config "$WORK/ck.ini" iris-ck "epochs = 40" "checkpoint_every = 20"
expect_rc 0 --json train "$WORK/ck.ini"
uninterrupted=$(json_get 'j["weights_hash"]')
ANNEAL_FAULT="checkpoint.committed@3=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/ck.ini" > /dev/null 2>&1
expect_eq "$?" "137" "the run was killed at its third checkpoint"
killed=$(latest_run)
refused "resume --device cuda" "--device: device cuda: $cuda_reason" train --resume "$killed" --device cuda
expect_rc 0 --json train --resume "$killed" --device cpu
expect_eq "$(json_get 'j["weights_hash"]')" "$uninterrupted" "resumed with --device cpu: the uninterrupted weights"
expect_rc 0 --json model show iris-ck@latest
expect_contains "$(json_get 'j["lineage"]["config"]')" "device = cpu" "the resumed run records the device it finished on"

# deterministic = false changes nothing on the CPU, which is deterministic
# anyway: no note, and the lineage says so.
expect_rc 0 --json train "$WORK/iris.ini" --device cpu --set deterministic=false
expect_eq "$(json_get 'j["weights_hash"]')" "$cpu_hash" "deterministic = false on the CPU: the same weights"
expect_eq "$(printf '%s' "$ERR" | grep -c 'deterministic = false')" "0" "no note on the CPU"
expect_rc 0 --json model show iris-mlp@latest
expect_eq "$(json_get 'j["lineage"]["deterministic"]')" "True" "the CPU records deterministic: true"

# eval and predict take --device too.
expect_rc 0 eval iris-mlp iris --device cpu
expect_eq "$(printf '%s' "$ERR" | grep -c 'device auto')" "0" "a named device: no note"
expect_rc 0 eval iris-mlp iris
expect_contains "$ERR" "device auto: running on the cpu (cuda: $cuda_reason)" "eval on auto says why it is on the CPU"
refused "eval --device cuda" "device cuda: $cuda_reason" eval iris-mlp iris --device cuda
refused "eval --device tpu" "--device: unknown device 'tpu'" eval iris-mlp iris --device tpu
head -n 5 "$TEST_DATA/iris.csv" > "$WORK/rows.csv"
expect_rc 0 predict iris-mlp --input "$WORK/rows.csv" -o "$WORK/out.csv" --device auto
expect_eq "$(wc -l < "$WORK/out.csv")" "5" "predict on auto writes a header and 4 rows"
refused "predict --device cuda" "device cuda" predict iris-mlp --input "$WORK/rows.csv" -o "$WORK/out2.csv" --device cuda
[ ! -e "$WORK/out2.csv" ] && pass || fail "a refused predict writes no output"

# The compression commands resolve the device before recording anything.
refused "quantize --device cuda" "device cuda" quantize iris-mlp --int8 --calib iris --device cuda
refused "bench --device cuda" "device cuda" bench iris-mlp --device cuda

# Plugins that are missing, not plugins, or damaged: cuda refused naming
# the file, auto on the CPU as before.
mkdir -p "$WORK/plugins/none" "$WORK/plugins/junk" "$WORK/plugins/other"
ANNEAL_PLUGIN_DIR="$WORK/plugins/none" expect_rc 2 train "$WORK/iris.ini" --device cuda
expect_contains "$ERR" "device cuda: the CUDA backend is not installed (no libanneal-cuda.so in $WORK/plugins/none)" \
  "no plugin: not installed"
head -c 4096 /dev/urandom > "$WORK/plugins/junk/libanneal-cuda.so"
ANNEAL_PLUGIN_DIR="$WORK/plugins/junk" expect_rc 2 train "$WORK/iris.ini" --device cuda
expect_contains "$ERR" "libanneal-cuda.so cannot be loaded" "a damaged plugin is refused"
ANNEAL_PLUGIN_DIR="$WORK/plugins/junk" expect_rc 0 train "$WORK/iris.ini"
expect_contains "$ERR" "device auto: training on the cpu (cuda: libanneal-cuda.so cannot be loaded" "auto trains past it"
# A plugin others may write, or in a directory others may write, is never
# loaded (issue 29): anyone could have planted it.
mkdir -p "$WORK/plugins/open"
cp "$WORK/plugins/junk/libanneal-cuda.so" "$WORK/plugins/open/"
chmod 0666 "$WORK/plugins/open/libanneal-cuda.so"
ANNEAL_PLUGIN_DIR="$WORK/plugins/open" expect_rc 2 train "$WORK/iris.ini" --device cuda
expect_contains "$ERR" "libanneal-cuda.so is not loaded: $WORK/plugins/open/libanneal-cuda.so may be written by others (mode 0666); chmod go-w" \
  "a plugin writable by others is refused"
chmod 0644 "$WORK/plugins/open/libanneal-cuda.so"
chmod 0777 "$WORK/plugins/open"
ANNEAL_PLUGIN_DIR="$WORK/plugins/open" expect_rc 2 train "$WORK/iris.ini" --device cuda
expect_contains "$ERR" "$WORK/plugins/open may be written by others (mode 0777)" "a plugin in a directory others may write is refused"
chmod 0755 "$WORK/plugins/open"
if command -v cc > /dev/null; then
  echo 'int not_a_plugin(void) { return 1; }' > "$WORK/plugins/other.c"
  cc -shared -fPIC -o "$WORK/plugins/other/libanneal-cuda.so" "$WORK/plugins/other.c"
  ANNEAL_PLUGIN_DIR="$WORK/plugins/other" expect_rc 2 eval iris-mlp iris --device cuda
  expect_contains "$ERR" "$WORK/plugins/other/libanneal-cuda.so is not an anneal backend plugin" "a library that is no plugin"
fi

finish
