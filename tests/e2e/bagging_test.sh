#!/bin/bash
# layers = auto refits each network of its model with `bags` seeds and
# averages them (issue 31; docs/TRAINING.md, "Bagging"): on the wine table
# with seed 3 the search's winner is one network, so bags = 1 registers that
# network and bags = 3 an ensemble of three fits of it. Checked with the
# independent reader of the documented format (tests/format/read_model.py):
# the three members hold equal weights, the first is bit for bit the
# unbagged network (bag 0 trains with the run's seed) and the others are
# not. The same seed repeats it; killed between bags, a resume ends at the
# same model; ensemble = false fits once; bad values of the key name it.
. "$E2E_LIB"

PY=/usr/bin/python3
READER="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)/read_model.py"
expect_rc 0 init
expect_rc 0 data import wine "$TEST_DATA/wine.csv" --split 0.2
cat > "$WORK/wine.ini" <<'INI'
name       = wine-auto
dataset    = wine
seed       = 3
max_trials = 14
threads    = 1
INI

# bags = 1: the winning network itself.
run --json train "$WORK/wine.ini" --set bags=1 --set name=wine-once
expect_eq "$RC" "0" "bags = 1 trains; stderr: $ERR"
expect_contains "$ERR" "search: network dense(64) relu dense(64) relu lr 0.003 scored best" \
  "with this seed a network wins alone (the premise of this test)"
once_hash=$(json_get 'j["weights_hash"]')
expect_rc 0 --json model show wine-once@v1
expect_eq "$(json_get '"ensemble" in j["lineage"]')" "False" "bags = 1: one network, no ensemble"

# bags = 3: three fits of it, averaged.
run --json train "$WORK/wine.ini" --set bags=3
expect_eq "$RC" "0" "bags = 3 trains; stderr: $ERR"
expect_contains "$ERR" "training it on all 134 training rows, each network with 3 seeds (bags)" "the run says it bags"
expect_contains "$ERR" "ensemble member 3/3 (weight 0.3333): network dense(64) relu dense(64) relu lr 0.003, seed 3 of 3" \
  "the run reports each bag as it trains"
bagged_hash=$(json_get 'j["weights_hash"]')
test_acc=$(json_get 'j["metrics"]["test_accuracy"]')
run_id=$(latest_run)
expect_rc 0 --json runs show "$run_id"
expect_eq "$(json_get 'j["summary"]["search"]["bags"]')" "3" "the leaderboard records the bags"
expect_rc 0 runs show "$run_id"
expect_contains "$OUT" "each network of the model refit with 3 seeds (bags)" "runs show says so"
expect_rc 0 runs report "$run_id" -o "$WORK/report.html"
grep -q "refit with 3 seeds (bags)" "$WORK/report.html" && pass || fail "the report does not say the model is bagged"
expect_rc 0 --json model show wine-auto@v1
expect_eq "$(json_get '[(m["kind"], m["weight"], m["bags"]) for m in j["lineage"]["ensemble"]]')" \
  "[('network', 1.0, 3)]" "the lineage: one trial, refit with 3 seeds"
"$PY" "$READER" blob --store "$ANNEAL_HOME" --model wine-auto@v1 -o "$WORK/bagged.bin" || fail "reader: blob"
"$PY" "$READER" hash "$WORK/bagged.bin" >/dev/null && pass || fail "the bagged model's weights_hash breaks the documented rule"
"$PY" - "$READER" "$WORK/bagged.bin" "$once_hash" <<'PY' && pass || fail "the bags are not the unbagged network and two others"
import hashlib, importlib.util, sys
spec = importlib.util.spec_from_file_location("read_model", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
header, tensors, payload = m.load_model_payload(sys.argv[2])
assert header["kind"] == "ensemble", header["kind"]
members = m.ensemble_members(header, payload)
assert len(members) == 3, len(members)
assert all(abs(e["weight"] - 1 / 3) < 1e-12 for e in header["members"]), header["members"]
hashes = []
for member, member_payload in members:
    assert member["kind"] == "network" and member["layers"].startswith("dense(64) relu dense(64) relu"), member
    h = hashlib.blake2b(digest_size=32)
    m.frame_kind(h, member, m.decode_tensors(member, member_payload), member_payload)
    hashes.append(h.hexdigest())
assert hashes[0] == sys.argv[3], f"bag 0 {hashes[0]} is not the unbagged network {sys.argv[3]}"
assert len(set(hashes)) == 3, hashes
PY
expect_rc 0 --json eval wine-auto@v1 wine --split test
expect_eq "$(json_get 'j["metrics"]["accuracy"]')" "$test_acc" "eval reproduces the bagged model's accuracy"
expect_rc 0 predict wine-auto@v1 --input "$TEST_DATA/wine.csv" -o "$WORK/p.csv"
expect_eq "$(wc -l < "$WORK/p.csv")" "$(wc -l < "$TEST_DATA/wine.csv")" "predict answers every row"

# The same seed and max_trials: the same bags, bit for bit.
run --json train "$WORK/wine.ini" --set bags=3
expect_eq "$(json_get 'j["weights_hash"]')" "$bagged_hash" "a bagged model repeats bit for bit"

# Killed after the first bag (the auto.member fault point of the test
# build): the resume takes the recorded trials and ends at the same model.
ANNEAL_FAULT="auto.member@1=crash" "$ANNEAL_FAULTS_BIN" train "$WORK/wine.ini" --set bags=3 > /dev/null 2>&1
expect_eq "$?" "137" "killed after the first bag"
resumes_to "$(latest_run)" 14 "$bagged_hash" "the killed bagged run"

# ensemble = false asks for one model: the winner fitted once.
expect_rc 0 --json train "$WORK/wine.ini" --set bags=3 --set ensemble=false --set name=wine-single
expect_eq "$(json_get 'j["weights_hash"]')" "$once_hash" "ensemble = false: the unbagged network"

# Bad values: one line naming the key, the store as it was.
before=$(store_state)
expect_error 2 "bags" train "$WORK/wine.ini" --set bags=0
expect_error 2 "bags" train "$WORK/wine.ini" --set bags=33
expect_error 2 "bags" train "$WORK/wine.ini" --set bags=three
expect_eq "$(store_state)" "$before" "refused configs leave the store as it was"

expect_rc 0 fsck
finish
