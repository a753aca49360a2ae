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
