#!/bin/bash
# Imbalanced labels (issue 31): a classifier's accuracy is recorded beside
# always answering the most common class of the same rows
# (<split>_majority_accuracy), and a model that does no better gets a
# warning. Here the features say nothing (one constant column), so no model
# can beat the majority, whatever the machine or the seed.
. "$E2E_LIB"

# (A separate test file: a split decided by row content would put equal
# rows on one side.)
python3 - "$WORK/flat.csv" "$WORK/flat-test.csv" <<'PY'
import sys
for path, rows in ((sys.argv[1], 300), (sys.argv[2], 100)):
    with open(path, "w") as f:
        f.write("x,churned\n")
        for i in range(rows):
            f.write("1,%s\n" % ("yes" if i % 10 == 0 else "no"))
PY
expect_rc 0 init
expect_rc 0 data import flat "$WORK/flat.csv" --test "$WORK/flat-test.csv"
for layers in linear trees "dense(4) relu dense(2)"; do
  printf 'name = flat\ndataset = flat\nlayers = %s\nepochs = 2\nthreads = 1\n' "$layers" > "$WORK/flat.ini"
  expect_rc 0 --json train "$WORK/flat.ini"
  expect_eq "$(json_get 'abs(j["metrics"]["test_majority_accuracy"] - j["metrics"]["test_accuracy"]) < 1e-12 or j["metrics"]["test_accuracy"] < j["metrics"]["test_majority_accuracy"]')" \
    "True" "$layers: no better than the majority"
  expect_eq "$(json_get '0.85 < j["metrics"]["test_majority_accuracy"] < 0.95')" "True" \
    "$layers: the majority rate is that of the test rows"
  run train "$WORK/flat.ini"
  expect_contains "$ERR$OUT" "warning: test_accuracy" "$layers: the run warns"
  expect_contains "$ERR$OUT" "is no better than always answering 'no'" "$layers: naming the majority class"
done

# A model that learns something is not warned about.
python3 - "$WORK/signal.csv" "$WORK/signal-test.csv" <<'PY'
import sys
for path, rows in ((sys.argv[1], 300), (sys.argv[2], 100)):
    with open(path, "w") as f:
        f.write("x,churned\n")
        for i in range(rows):
            f.write("%d,%s\n" % (i % 10, "yes" if i % 10 == 0 else "no"))
PY
expect_rc 0 data import signal "$WORK/signal.csv" --test "$WORK/signal-test.csv"
printf 'name = signal\ndataset = signal\nlayers = trees\nthreads = 1\n' > "$WORK/signal.ini"
run train "$WORK/signal.ini"
expect_eq "$RC" "0" "the trees train"
case "$ERR$OUT" in
  *"warning: test_accuracy"*) fail "a model that beats the majority was warned about" ;;
  *) pass ;;
esac
finish
