#!/bin/bash
# anneal data check NEW --against REF (issue 33): nights of a sales export,
# each with one fault a plausible export can carry, checked against the
# clean night:
#   * a unit change (unit_price in cents): PSI and KS of that column;
#   * an exploding category (region 'north' on most rows): PSI over levels;
#   * an emptied column (quantity 60% missing): the missing rate;
#   * a flipped label balance (returned mostly 'yes'): the label's PSI;
#   * a new level nobody saw (channel 'fax' on many rows): unseen share;
#   * a column gone and one retyped: absent, type.
# Each fault fails (exit 3) naming that column and check, and only it; the
# clean night and a fresh sample of the same distribution pass (exit 0);
# --json carries every figure; the figures are the same twice; image
# versions and bad flags are one-line usage errors (exit 2) and the store is
# unchanged by every check.
. "$E2E_LIB"
PY=${PYTHON:-/usr/bin/python3}

"$PY" - "$WORK" <<'PY'
import csv, random, sys
work = sys.argv[1]
def night(name, seed, fault=None):
    rng = random.Random(seed)
    with open(f"{work}/{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        header = ["order_id", "order_date", "region", "channel", "quantity", "unit_price", "discount", "returned"]
        if fault == "dropped": header.remove("discount")
        w.writerow(header)
        for i in range(3000):
            region = rng.choice(["north", "south", "east", "west"])
            channel = rng.choice(["web", "shop", "phone"])
            quantity = rng.randint(1, 9)
            price = round(rng.lognormvariate(3, 0.6), 2)
            discount = rng.choice([0, 0, 0, 5, 10])
            returned = "yes" if rng.random() < 0.15 else "no"
            if fault == "cents": price = round(price * 100, 2)
            if fault == "explode" and rng.random() < 0.7: region = "north"
            if fault == "empty" and rng.random() < 0.6: quantity = ""
            if fault == "flip": returned = "yes" if rng.random() < 0.7 else "no"
            if fault == "unseen" and rng.random() < 0.3: channel = "fax"
            row = {"order_id": f"SO-{seed}-{i:06d}", "order_date": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
                   "region": region, "channel": channel, "quantity": quantity, "unit_price": price,
                   "discount": f"d{discount}" if fault == "retyped" else discount, "returned": returned}
            w.writerow([row[h] for h in header])
night("clean", 1)
night("fresh", 2)
for i, fault in enumerate(["cents", "explode", "empty", "flip", "unseen", "dropped", "retyped"]):
    night(fault, 10 + i, fault)
PY
expect_rc 0 init
for v in clean fresh cents explode empty flip unseen dropped retyped; do
  expect_rc 0 data import "$v" "$WORK/$v.csv" --label returned
done

before=$(store_state)
expect_rc 0 data check clean --against clean
expect_contains "$OUT" "passed" "a version against itself passes"
expect_rc 0 --json data check fresh --against clean
expect_eq "$(json_get 'j["passed"]')" "True" "another night of the same distribution passes: $(json_get 'j["columns"]')"
expect_eq "$(json_get '[c["kind"] for c in j["columns"]]')" \
  "['identifier', 'datetime', 'categorical', 'categorical', 'numeric', 'numeric', 'numeric', 'categorical']" \
  "each column's kind (order_id is an identifier, the label categorical)"
expect_eq "$(json_get '[c["column"] for c in j["columns"] if c["label"]]')" "['returned']" "the label is marked"
first=$(json_get 'json.dumps(j["columns"])')
expect_rc 0 --json data check fresh --against clean
expect_eq "$(json_get 'json.dumps(j["columns"])')" "$first" "the same figures twice"

# check FAULT COLUMN NEEDLE: exit 3, only COLUMN fails, its failure names NEEDLE.
check() {
  expect_rc 3 --json data check "$1" --against clean
  expect_eq "$(json_get '[c["column"] for c in j["columns"] if c["failures"]]')" "['$2']" "$1: only $2 fails"
  expect_contains "$(json_get '" ".join(f for c in j["columns"] for f in c["failures"])')" "$3" "$1: $2 fails on $3"
  expect_eq "$(json_get 'j["exit_code"]')" "3" "$1: --json has the exit code"
}
check cents unit_price "psi"
check cents unit_price "ks"
check explode region "psi"
check empty quantity "missing 0."
check flip returned "psi"
check unseen channel "unseen levels 0."
check dropped discount "absent"
check retyped discount "type numeric -> categorical"

# The text form: one table and one line naming every failure.
expect_rc 3 data check cents --against clean
expect_contains "$OUT" "failed: unit_price: psi" "the last line names the failure"
expect_contains "$OUT" "unit_price" "the table lists the column"

# Thresholds are flags.
expect_rc 0 data check empty --against clean --max-missing-increase 0.7
expect_rc 3 --json data check fresh --against clean --max-psi 0 --max-ks 0
expect_contains "$(json_get 'j["thresholds"]')" "'psi': 0.0" "--max-psi reaches the check"

# Refusals: one line, exit 2.
expect_rc 2 data check clean --against clean --max-psi -1
expect_contains "$ERR" "--max-psi -1: expected a number >= 0" "a negative threshold"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "one line"
expect_rc 2 data check clean
expect_contains "$ERR" "--against" "the reference is required"
expect_rc 1 data check clean --against nosuch
expect_contains "$ERR" "nosuch" "an unknown reference is named"
"$PY" - "$WORK/images.idx" "$WORK/labels.idx" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 10, 2, 2) + bytes(range(40)))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack(">II", 0x801, 10) + bytes(i % 2 for i in range(10)))
PY
expect_rc 0 data import img "$WORK/images.idx" --labels "$WORK/labels.idx"
before=$(store_state)
expect_rc 2 data check img --against clean
expect_contains "$ERR" "images: data checks compare table columns" "image data is refused"
expect_eq "$(store_state)" "$before" "checks leave the store as it was"
finish
