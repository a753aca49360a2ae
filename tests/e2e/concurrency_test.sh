#!/bin/bash
# Two processes importing into one store at once both succeed with distinct
# versions; gc running alongside imports never removes their objects.
. "$E2E_LIB"

expect_rc 0 init
python3 - "$WORK" <<'PY'
import random, sys
work = sys.argv[1]
for n in range(4):
    rng = random.Random(n)
    with open(f"{work}/part{n}.csv", "w") as f:
        f.write("x1,x2,x3,x4,y\n")
        for i in range(120000):
            f.write(",".join(f"{rng.random():.6f}" for _ in range(4)) + f",{i % 3}\n")
PY
pids=()
for n in 0 1 2 3; do
  "$ANNEAL" data import shared "$WORK/part$n.csv" >"$WORK/out$n" 2>&1 &
  pids+=($!)
done
"$ANNEAL" gc >"$WORK/gc.out" 2>&1 &
gc_pid=$!
for n in 0 1 2 3; do
  wait "${pids[$n]}" && pass || fail "import $n failed: $(cat "$WORK/out$n")"
done
wait "$gc_pid" && pass || fail "gc failed: $(cat "$WORK/gc.out")"
expect_rc 0 --json data list
expect_eq "$(json_get 'j["datasets"][0]["versions"]')" "4" "four distinct versions"
versions=$(cat "$WORK"/out* | grep -o 'shared@v[0-9]*' | sort -u | tr '\n' ' ')
expect_eq "$versions" "shared@v1 shared@v2 shared@v3 shared@v4 " "each import got its own number"
"$ANNEAL" gc >/dev/null
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after concurrent imports and gc"
for v in 1 2 3 4; do
  expect_rc 0 data export "shared@v$v" -o "$WORK/export$v.csv"
done
# Every exported version is one of the inputs, byte for byte.
for v in 1 2 3 4; do
  found=0
  for n in 0 1 2 3; do cmp -s "$WORK/export$v.csv" "$WORK/part$n.csv" && found=1; done
  [ $found -eq 1 ] && pass || fail "shared@v$v matches no input"
done
finish
