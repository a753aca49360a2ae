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

# A binary model's decision threshold (threshold_metric, default auto:
# balanced accuracy when the majority class holds more than 80% of the
# training rows). A noisy table with about 12% positives, fixed by its seed:
# at 0.5 the linear model rarely answers "yes"; the threshold it picks on
# its validation rows raises the test rows' balanced accuracy.
python3 - "$WORK/rare.csv" "$WORK/rare-test.csv" <<'PY'
import math, random, sys
rng = random.Random(31)
for path, rows in ((sys.argv[1], 1500), (sys.argv[2], 1000)):
    with open(path, "w") as f:
        f.write("x,z,churned\n")
        for _ in range(rows):
            x, z = rng.gauss(0, 1), rng.gauss(0, 1)
            p = 1 / (1 + math.exp(-(1.5 * x + 0.5 * z - 3)))
            f.write("%.6f,%.6f,%s\n" % (x, z, "yes" if rng.random() < p else "no"))
PY
expect_rc 0 data import rare "$WORK/rare.csv" --test "$WORK/rare-test.csv"
for layers in linear trees; do
  printf 'name = rare-%s\ndataset = rare\nlayers = %s\nvalidation = 0.3\nseed = 2\nthreads = 1\n' \
    "$layers" "$layers" > "$WORK/rare.ini"
  expect_rc 0 --json train "$WORK/rare.ini" --set threshold_metric=none
  at_half=$(json_get 'j["metrics"]["test_balanced_accuracy"]')
  expect_eq "$(json_get '"decision_threshold" in j["metrics"]')" "False" "$layers: threshold_metric = none keeps the arg max"
  expect_rc 0 --json train "$WORK/rare.ini"
  tuned=$(json_get 'j["metrics"]["test_balanced_accuracy"]')
  threshold=$(json_get 'j["metrics"]["decision_threshold"]')
  expect_eq "$(python3 -c "print($tuned > $at_half + 0.03)")" "True" \
    "$layers: the chosen threshold ($threshold) raises the test balanced accuracy ($at_half at 0.5, $tuned)"
  expect_eq "$(python3 -c "print(0 < $threshold < 0.5)")" "True" "$layers: the threshold favours the rare class"
  run train "$WORK/rare.ini"
  expect_contains "$ERR$OUT" "decision threshold" "$layers: the run says which threshold it chose"
  expect_contains "$ERR$OUT" "for balanced_accuracy (threshold_metric = auto" "$layers: auto chose balanced accuracy"
  # eval and predict use it: eval reproduces the run's test scores, and the
  # classes predict writes score as eval does.
  expect_rc 0 --json eval "rare-$layers@v2" rare
  expect_eq "$(json_get 'j["metrics"]["balanced_accuracy"]')" "$tuned" "$layers: eval uses the threshold"
  expect_rc 0 predict "rare-$layers@v2" --input "$WORK/rare-test.csv" -o "$WORK/rare-$layers.out.csv"
  expect_eq "$(python3 - "$WORK/rare-test.csv" "$WORK/rare-$layers.out.csv" "$threshold" <<'PY'
import csv, sys
truth = [r["churned"] for r in csv.DictReader(open(sys.argv[1]))]
out = list(csv.DictReader(open(sys.argv[2])))
t = float(sys.argv[3])
# Every row's class is its P(yes) against the threshold...
assert all(r["prediction"] == ("yes" if float(r["p_yes"]) > t else "no") for r in out), "a class disagrees with P(yes)"
# ...and some rows answer yes below 0.5, which the arg max would not.
assert any(r["prediction"] == "yes" and float(r["p_yes"]) < 0.5 for r in out), "no row moved by the threshold"
recall = {}
for c in ("yes", "no"):
    rows = [p["prediction"] for p, y in zip(out, truth) if y == c]
    recall[c] = sum(p == c for p in rows) / len(rows)
print(round((recall["yes"] + recall["no"]) / 2, 9))
PY
)" "$(python3 -c "print(round($tuned, 9))")" "$layers: predict's classes give eval's balanced accuracy"
done
finish
