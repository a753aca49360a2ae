#!/bin/bash
# Regression on a CSV with a categorical feature and missing values: mse
# training, RMSE/MAE/R2 in the target's units, the ridge baseline beside it,
# and predict counting categories the model never saw.
. "$E2E_LIB"

expect_rc 0 init
python3 - "$WORK/houses.csv" "$WORK/new.csv" <<'PY'
import random, sys
rng = random.Random(7)
effect = {"red": 5.0, "green": -3.0, "blue": 0.0}
with open(sys.argv[1], "w") as f:
    f.write("size,age,color,price\n")
    for i in range(600):
        size, age, color = rng.uniform(50, 200), rng.uniform(0, 40), rng.choice(list(effect))
        price = 2.0 * size - 1.5 * age + effect[color] + rng.gauss(0, 2)
        size_text = "" if i % 50 == 7 else f"{size:.2f}"   # a few missing sizes
        f.write(f"{size_text},{age:.2f},{color},{price:.3f}\n")
with open(sys.argv[2], "w") as f:
    f.write("color,age,size\n")      # other order, no price column
    f.write("red,10,100\n")
    f.write("purple,10,100\n")       # a category the model never saw
    f.write("blue,,150\n")           # a missing value
PY
expect_rc 0 data import houses "$WORK/houses.csv"
cat >"$WORK/h.ini" <<'INI'
name    = houses
dataset = houses
layers  = dense(32) relu dense(1)
loss    = mse
lr      = 0.01
batch   = 32
epochs  = 40
seed    = 2
threads = 1
validation = 0.1
INI
expect_rc 0 --json train "$WORK/h.ini"
r2=$(json_get 'j["metrics"]["test_r2"]')
python3 -c "import sys; sys.exit(0 if $r2 > 0.9 else 1)" && pass || fail "regression test R2 $r2 <= 0.9"
json_get 'all(k in j["metrics"] for k in ("test_rmse","test_mae","val_rmse","baseline_test_rmse","baseline_val_rmse"))' \
  | grep -q True && pass || fail "regression metrics and the ridge baseline reported"
rmse=$(json_get 'j["metrics"]["test_rmse"]')
expect_rc 0 --json eval houses houses
expect_eq "$(json_get 'j["metrics"]["rmse"]')" "$rmse" "eval reproduces the run's RMSE"
expect_rc 0 eval houses houses
expect_contains "$OUT" "RMSE" "regression eval prints RMSE"
expect_contains "$OUT" "R2" "regression eval prints R2"

expect_rc 0 --json predict houses --input "$WORK/new.csv" -o "$WORK/out.csv"
expect_eq "$(json_get 'j["unseen_categories"]')" "1" "the unseen category is counted"
expect_eq "$(json_get 'j["missing_values"]')" "1" "the missing value is counted"
expect_eq "$(head -1 "$WORK/out.csv")" "row,prediction" "regression output header"
red=$(sed -n 2p "$WORK/out.csv" | cut -d, -f2)
python3 -c "import sys; sys.exit(0 if abs($red - 190) < 8 else 1)" && pass || fail "prediction for red,10,100 is $red, expected about 190"
expect_rc 0 predict houses --input "$WORK/new.csv" -o "$WORK/out2.csv"
expect_contains "$OUT" "1 categorical values the model never saw" "plain output reports unseen categories"

# layers = linear with mse: ridge regression is the model.
expect_rc 0 --json train "$WORK/h.ini" --set layers=linear --set name=houses-ridge
r2=$(json_get 'j["metrics"]["test_r2"]')
python3 -c "import sys; sys.exit(0 if $r2 > 0.95 else 1)" && pass || fail "ridge test R2 $r2"
finish
