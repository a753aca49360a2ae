# Shared by the benchmarks: sourced after `set -euo pipefail` with $ANNEAL set.
# Gives PYTHON (Debian's, where python3-torch lives, unless set), FMNIST
# (or $FMNIST_DIR), a throwaway
# WORK directory removed on exit, and a fresh store in it (ANNEAL_HOME).
PYTHON=${PYTHON:-/usr/bin/python3}
FMNIST=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anneal-bench-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export ANNEAL_HOME="$WORK/store"
"$ANNEAL" init > /dev/null

# import_fmnist: Fashion-MNIST's train and test files as dataset `fmnist`.
import_fmnist() {
  "$ANNEAL" data import fmnist "$FMNIST/train-images-idx3-ubyte.gz" --labels "$FMNIST/train-labels-idx1-ubyte.gz" \
    --test "$FMNIST/t10k-images-idx3-ubyte.gz" --test-labels "$FMNIST/t10k-labels-idx1-ubyte.gz" > /dev/null
}

# cpu_caps: the CPU as anneal's oneDNN sees it (`anneal --json devices`,
# after ONEDNN_MAX_CPU_ISA): CPU_ISA ("avx2", "avx512_core_bf16"), CPU_BF16
# and CPU_VNNI (1 or 0).
cpu_caps() {
  local caps
  caps=$("$ANNEAL" --json devices | "$PYTHON" -c "
import json, sys
cpu = [d for d in json.load(sys.stdin)['devices'] if d['device'] == 'cpu'][0]
print(cpu['isa'], int(cpu['bf16']), int(cpu['int8_vnni']))")
  read -r CPU_ISA CPU_BF16 CPU_VNNI <<< "$caps"
}
