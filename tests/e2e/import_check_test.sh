#!/bin/bash
# `data import --check` (issue 33): each night's export is checked, as it is
# imported, against the dataset's latest version before it. The first
# version has nothing to check against (exit 0, said so); a night of the
# same distribution passes (exit 0); a night with a unit change is imported
# all the same (the store keeps the export as it came) but exits 3 naming
# the column and the check, in the table and in --json; re-importing the
# latest content checks nothing new. Thresholds without --check, a bad file
# and a dataset of images are refused with the store exactly as it was.
. "$E2E_LIB"
PY=${PYTHON:-/usr/bin/python3}

"$PY" - "$WORK" <<'PY'
import csv, random, sys
work = sys.argv[1]
def night(name, seed, fault=None):
    rng = random.Random(seed)
    with open(f"{work}/{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["region", "quantity", "unit_price", "returned"])
        for i in range(2000):
            price = round(rng.lognormvariate(3, 0.6), 2)
            if fault == "cents": price = round(price * 100, 2)
            w.writerow([rng.choice(["north", "south", "east"]), rng.randint(1, 9), price,
                        "yes" if rng.random() < 0.2 else "no"])
night("night1", 1)
night("night2", 2)
night("cents", 3, "cents")
PY

expect_rc 0 init
expect_rc 0 --json data import orders "$WORK/night1.csv" --check
expect_eq "$(json_get 'j["data_checks"]')" "None" "the first version has nothing to check against"
expect_contains "$(json_get 'j["not_checked"]')" "orders@v1 is the first version of orders" "and says so"

expect_rc 0 data import orders "$WORK/night2.csv" --check
expect_contains "$OUT" "imported orders@v2" "a second night is imported"
expect_contains "$OUT" "orders@v2 (2000 rows) against orders@v1 (2000 rows)" "checked against the version before it"
expect_contains "$OUT" "passed" "a night of the same distribution passes"

expect_rc 3 --json data import orders "$WORK/cents.csv" --check
expect_eq "$(json_get 'j["version"]["ref"] if "ref" in j["version"] else j["version"]["name"] + "@v" + str(j["version"]["version"])')" \
  "orders@v3" "the faulty night is imported all the same"
expect_eq "$(json_get 'j["exit_code"]')" "3" "--json says exit 3"
expect_eq "$(json_get 'j["data_checks"]["reference"]')" "orders@v2" "against the latest version before it"
expect_eq "$(json_get '[c["column"] for c in j["data_checks"]["columns"] if c["failures"]]')" "['unit_price']" \
  "only unit_price fails"
expect_rc 0 data list
expect_contains "$OUT" "orders@v3" "the store holds the faulty night as it came"

# The text form names the column and the check on its last line.
expect_rc 0 data import prices "$WORK/night2.csv"
expect_rc 3 data import prices "$WORK/cents.csv" --check --max-ks 1
expect_contains "$OUT" "FAIL psi" "the table marks the failed check"
expect_contains "$(printf '%s\n' "$OUT" | tail -n 1)" "failed: unit_price: psi" "the last line names it"
expect_eq "$(printf '%s\n' "$OUT" | grep -c 'FAIL.*ks')" "0" "--max-ks 1 lets its KS pass"

# The same content again: the latest version, nothing new to check.
expect_rc 0 data import orders "$WORK/cents.csv" --check
expect_contains "$OUT" "not checked: orders@v3 was already the latest version" "an unchanged import checks nothing"

# Refusals leave the store exactly as it was.
before=$(store_state)
expect_rc 2 data import orders "$WORK/night2.csv" --max-psi 0.1
expect_contains "$ERR" "give --check too" "a threshold without --check"
expect_rc 2 data import orders "$WORK/night2.csv" --check --max-psi -1
expect_contains "$ERR" "--max-psi" "a negative threshold names its flag"
printf 'region,quantity,unit_price,returned\nnorth,1,2.5,no\nsouth,x,3\n' > "$WORK/bad.csv"
expect_rc 65 data import orders "$WORK/bad.csv" --check
expect_contains "$ERR" "bad.csv:3" "a bad file names its line"
expect_eq "$(store_state)" "$before" "the refusals left the store as it was"
"$PY" - "$WORK" <<'PY'
import struct, sys
work = sys.argv[1]
with open(f"{work}/img.idx", "wb") as f:
    f.write(struct.pack(">IIII", 0x00000803, 20, 4, 4) + bytes(i % 256 for i in range(20 * 16)))
with open(f"{work}/img-labels.idx", "wb") as f:
    f.write(struct.pack(">II", 0x00000801, 20) + bytes(i % 3 for i in range(20)))
PY
expect_rc 0 data import images "$WORK/img.idx" --labels "$WORK/img-labels.idx" --split 0.2
before=$(store_state)
expect_rc 2 data import images "$WORK/img.idx" --labels "$WORK/img-labels.idx" --split 0.3 --check
expect_contains "$ERR" "images" "a dataset of images cannot be checked, said before importing"
expect_eq "$(store_state)" "$before" "and nothing was imported"
finish
