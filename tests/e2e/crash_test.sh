#!/bin/bash
# kill -9 of an import at many moments: the store always passes fsck and the
# same import then succeeds.
. "$E2E_LIB"

expect_rc 0 init
python3 - "$WORK/big.csv" <<'PY'
import random, sys
rng = random.Random(42)
with open(sys.argv[1], "w") as f:
    f.write(",".join(f"c{i}" for i in range(12)) + ",label\n")
    for i in range(250000):
        f.write(",".join(f"{rng.gauss(0, 1):.5f}" for _ in range(12)) + f",{i % 5}\n")
PY
# How long an uninterrupted import takes, to spread the kills over it.
start=$(date +%s%N)
expect_rc 0 --store "$WORK/timing" init
expect_rc 0 --store "$WORK/timing" data import t "$WORK/big.csv"
total_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$total_ms" -lt 20 ] && total_ms=20

for attempt in 1 2 3 4 5 6 7 8 9 10; do
  delay_ms=$(( total_ms * attempt / 11 + RANDOM % 7 ))
  "$ANNEAL" data import big "$WORK/big.csv" >/dev/null 2>&1 &
  pid=$!
  sleep "$(awk "BEGIN { print $delay_ms / 1000 }")"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  run fsck
  if [ "$RC" -ne 0 ]; then fail "fsck after kill at ${delay_ms} ms: $OUT $ERR"; else pass; fi
done
expect_rc 0 data import big "$WORK/big.csv"
expect_rc 0 --json data show big
expect_eq "$(json_get 'j["rows"]')" "250000" "import after kills"
expect_rc 0 data export big -o "$WORK/back.csv"
cmp -s "$WORK/back.csv" "$WORK/big.csv" && pass || fail "export after kills is bit-identical"
expect_rc 0 gc
expect_rc 0 fsck
expect_contains "$OUT" ": ok" "fsck after gc"
expect_eq "$(find "$ANNEAL_HOME/tmp" -type f | wc -l)" "0" "gc removed leftover temporary files"
finish
