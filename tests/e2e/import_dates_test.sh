#!/bin/bash
# Date and date-time columns at import: the sales fixture's order_date is a
# datetime column with the right min and max, exported bit-identical; a
# garbage or impossible date is one line and exit 65 with the store as it
# was; --categorical keeps the old reading; ambiguous dates get a note and
# need --date-format, which the version records, retrain --data repeats and
# predict applies to new rows.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import sales "$TEST_DATA/sales.csv" --label returned
expect_rc 0 --json data show sales
expect_eq "$(json_get 'j["columns"][1]["name"], j["columns"][1]["type"], j["columns"][1]["datetime_format"], j["columns"][1]["has_time"]')" \
  "order_date datetime YYYY-MM-DD HH:MM True" "order_date is a datetime column"
# The expected range, computed here from the file.
want=$(python3 - "$TEST_DATA/sales.csv" <<'PY'
import csv, sys
dates = [row["order_date"] for row in csv.DictReader(open(sys.argv[1]))]
print(min(dates), max(dates))
PY
)
expect_eq "$(json_get 'j["columns"][1]["min_text"], j["columns"][1]["max_text"]')" "$want" "min and max as date-times"
expect_eq "$(json_get '[c["type"] for c in j["columns"]]')" \
  "['categorical', 'datetime', 'categorical', 'categorical', 'categorical', 'categorical', 'numeric', 'numeric', 'numeric', 'categorical']" \
  "the other columns as before"
expect_rc 0 data show sales
expect_contains "$OUT" "order_date  datetime" "data show says datetime"
expect_contains "$OUT" "${want%% *}" "data show prints the minimum as a date-time"
expect_contains "$OUT" "format YYYY-MM-DD HH:MM" "data show prints the format"

# The source is stored as given.
expect_rc 0 data export sales -o "$WORK/sales.out.csv"
cmp -s "$WORK/sales.out.csv" "$TEST_DATA/sales.csv" && pass || fail "export is bit-identical"

# --categorical keeps a date column a category per value, the old reading;
# diff reports the type change.
expect_rc 0 data import sales "$TEST_DATA/sales.csv" --label returned --categorical order_date
expect_contains "$OUT" "sales@v2" "another reading is another version"
expect_rc 0 --json data show sales@v2
expect_eq "$(json_get 'j["columns"][1]["type"], len(j["columns"][1]["categories"]) > 3000')" "categorical True" \
  "--categorical order_date"
expect_rc 0 data diff sales@v1 sales@v2
expect_contains "$OUT" "column 'order_date' changed type datetime -> categorical" "diff names the type change"

# A garbage date after the first 1000 rows, and an impossible one: one line,
# exit 65, nothing stored.
before=$(store_state)
cp "$TEST_DATA/sales.csv" "$WORK/garbage.csv"
echo "SO-004001,yesterday,Karl Hofmann,P-0076,east,web,3,15.60,0,no" >> "$WORK/garbage.csv"
expect_rc 65 data import sales "$WORK/garbage.csv" --label returned
expect_eq "$ERR" "anneal: $WORK/garbage.csv:4002:11: expected a date-time like 2024-03-01 09:30 (column 'order_date', format YYYY-MM-DD HH:MM), found 'yesterday'; use --categorical order_date" \
  "garbage date: one line naming place, column and format"
cp "$TEST_DATA/sales.csv" "$WORK/impossible.csv"
echo "SO-004001,2023-02-30 10:00,Karl Hofmann,P-0076,east,web,3,15.60,0,no" >> "$WORK/impossible.csv"
expect_rc 65 data import sales "$WORK/impossible.csv" --label returned
expect_contains "$ERR" "found '2023-02-30 10:00' (no such date or time)" "impossible date"
expect_eq "$(store_state)" "$before" "bad dates leave the store as it was"

# Ambiguous dates: text, with a note; --date-format reads them.
python3 - "$WORK/visits.csv" <<'PY'
import datetime, random, sys
rng = random.Random(7)
start = datetime.date(2023, 1, 1)
with open(sys.argv[1], "w") as f:
    f.write("visit,amount,kind\n")
    for i in range(300):
        d = start + datetime.timedelta(days=i)
        f.write(f"{d:%d/%m/%Y},{rng.uniform(1, 100):.2f},{'late' if d.month >= 7 else 'early'}\n")
PY
expect_rc 0 data import visits "$WORK/visits.csv"
expect_eq "$ERR" "note: column 'visit' is read as text though its values look like dates in DD/MM/YYYY; --date-format visit=DD/MM/YYYY reads them as dates" \
  "one note line suggesting --date-format"
expect_rc 0 --json data show visits
expect_eq "$(json_get 'j["columns"][0]["type"]')" "categorical" "ambiguous dates stay categorical"
expect_rc 2 data import visits "$WORK/visits.csv" --date-format visits=DD/MM/YYYY
expect_eq "$ERR" "anneal: --date-format visits=DD/MM/YYYY: no column 'visits' in $WORK/visits.csv; did you mean 'visit'? (columns: visit, amount, kind)" \
  "unknown column: usage error with a suggestion"
expect_rc 2 data import visits "$WORK/visits.csv" --date-format DD/MM/YY
expect_contains "$ERR" "--date-format DD/MM/YY: expected YYYY" "a bad format names the flag"
expect_rc 2 data import visits "$WORK/visits.csv" --date-format kind=DD/MM/YYYY
expect_contains "$ERR" "the label column" "the label is never a date"
printf '1 1:0.5\n0 2:1.5\n' > "$WORK/small.svm"
expect_rc 2 data import svm "$WORK/small.svm" --date-format DD/MM/YYYY
expect_eq "$ERR" "anneal: --date-format: only CSV/TSV data has date columns; this input is libsvm" "dates are CSV/TSV only"
expect_rc 65 data import visits "$WORK/visits.csv" --date-format visit=MM/DD/YYYY
expect_eq "$ERR" "anneal: $WORK/visits.csv:14:1: expected a date like 03/01/2024 (column 'visit', format MM/DD/YYYY), found '13/01/2023' (no such date or time); check --date-format visit=MM/DD/YYYY" \
  "a named format that does not fit names the flag"
expect_rc 0 --json data import visits "$WORK/visits.csv" --date-format visit=DD/MM/YYYY
expect_eq "$(json_get 'j["version"]["ref"], j["version"]["columns"][0]["type"], j["version"]["columns"][0]["min_text"], j["version"]["columns"][0]["max_text"]')" \
  "visits@v2 datetime 2023-01-01 2023-10-27" "visits read as DD/MM/YYYY"
expect_eq "$(json_get 'j["version"]["options"]["date_formats"], j["date_format_hints"]')" "['visit=DD/MM/YYYY'] []" \
  "the version records the format"
expect_rc 0 --json data import visits "$WORK/visits.csv" --date-format DD/MM/YYYY
expect_eq "$(json_get 'j["created"], j["version"]["ref"], j["version"]["columns"][0]["type"]')" "True visits@v3 datetime" \
  "a bare format applies to the column that fits; another option, another fingerprint"

# retrain --data re-imports the way the latest version was imported, date
# format included; predict reads new rows' dates in the model's format.
cat > "$WORK/visits.ini" <<'EOF'
name = visits-mlp
dataset = visits
layers = dense(8) relu dense(2)
epochs = 3
batch = 32
seed = 1
threads = 1
EOF
python3 - "$WORK/visits.csv" "$WORK/visits2.csv" <<'PY'
import sys
rows = open(sys.argv[1]).read().splitlines()
open(sys.argv[2], "w").write("\n".join(rows + ["28/10/2023,50.00,late", "29/10/2023,12.50,late"]) + "\n")
PY
expect_rc 0 --json retrain "$WORK/visits.ini" --data "$WORK/visits2.csv"
expect_eq "$(json_get "j['dataset']")" "visits@v4" "retrain imported the new export"
expect_rc 0 --json data show visits@v4
expect_eq "$(json_get 'j["columns"][0]["type"], j["options"]["date_formats"], j["columns"][0]["max_text"]')" \
  "datetime ['DD/MM/YYYY'] 2023-10-29" "with the latest version's date format"
printf 'amount,visit\n10.5,13/11/2023\n20.0,01/12/2023\n' > "$WORK/new-visits.csv"
expect_rc 0 predict visits-mlp --input "$WORK/new-visits.csv" -o "$WORK/predictions.csv"
expect_eq "$(wc -l < "$WORK/predictions.csv")" "3" "predict reads new dates in the model's format"
printf 'amount,visit\n10.5,2023-11-13\n' > "$WORK/iso-visits.csv"
expect_rc 65 predict visits-mlp --input "$WORK/iso-visits.csv" -o "$WORK/predictions2.csv"
expect_contains "$ERR" "(column 'visit', format DD/MM/YYYY as the model was trained), found '2023-11-13'" \
  "predict input in another date format"
# Columns the model does not use are read as text: garbage after the first
# 1000 rows (where an import would have typed the column) in an unused ISO
# date column or an unused numeric column does not fail the prediction; a
# missing column the model needs is named.
python3 - "$WORK/extra-visits.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("amount,visit,note_date,code\n")
    for i in range(1100):
        f.write(f"{10 + i % 50}.5,13/11/2023,2023-11-01,{i}\n")
    f.write("20.0,01/12/2023,yesterday,x\n")
PY
expect_rc 0 predict visits-mlp --input "$WORK/extra-visits.csv" -o "$WORK/predictions3.csv"
expect_eq "$(wc -l < "$WORK/predictions3.csv")" "1102" "every row predicted beside unused odd columns"
expect_eq "$(tail -n 1 "$WORK/predictions3.csv" | cut -d, -f2-)" "$(tail -n 1 "$WORK/predictions.csv" | cut -d, -f2-)" \
  "columns the model does not use change nothing"
printf 'amount\n10.5\n' > "$WORK/no-visit.csv"
run predict visits-mlp --input "$WORK/no-visit.csv" -o "$WORK/predictions4.csv"
[ "$RC" -ne 0 ] && pass || fail "predict without a column the model needs succeeded"
expect_contains "$ERR" "visit" "the missing date column is named"

# A model trained while the dates were text cannot be scored where they are
# dates. (As text, one value a row, the column reads as an identifier and is
# left out unless named in features=.)
expect_rc 0 --json train "$WORK/visits.ini" --set dataset=visits@v1 --set features=visit,amount
expect_rc 2 eval "$(json_get 'j["model"]')" visits@v2
expect_eq "$ERR" "anneal: dataset visits@v2: column 'visit' is datetime here; the model was trained on it as categorical" \
  "a model of the text reading on the dates reading: one line"

expect_rc 0 fsck
# A dataset imported before anneal read dates (its options have no
# date_formats): a nightly retrain keeps its text columns text, so its model
# and the one in production see the same schema, and says so in one line.
head -n 200 "$TEST_DATA/sales.csv" | cut -d, -f2,5-10 > "$WORK/old-sales.csv"
head -n 400 "$TEST_DATA/sales.csv" | cut -d, -f2,5-10 > "$WORK/old-sales2.csv"
expect_rc 0 data import oldsales "$WORK/old-sales.csv" --label returned --categorical order_date
python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(vid, options), = db.execute("SELECT v.id, v.options_json FROM dataset_versions v JOIN datasets d ON d.id = v.dataset_id WHERE d.name = 'oldsales'")
o = json.loads(options)
del o["date_formats"]
o["categorical"] = []
db.execute("UPDATE dataset_versions SET options_json = ? WHERE id = ?", (json.dumps(o), vid))
db.commit()
PY
cat > "$WORK/oldsales.ini" <<'EOF'
name = oldsales-mlp
dataset = oldsales
layers = dense(8) relu dense(2)
epochs = 1
seed = 1
threads = 1
EOF
expect_rc 0 --json retrain "$WORK/oldsales.ini" --data "$WORK/old-sales2.csv"
expect_contains "$ERR" "oldsales@v1 was imported before dates were read as dates: its 3 text column(s) stay text" \
  "retrain of a pre-dates dataset says its text columns stay text"
expect_rc 0 --json data show oldsales@v2
expect_eq "$(json_get 'j["columns"][0]["name"], j["columns"][0]["type"]')" "order_date categorical" \
  "the date column of a pre-dates dataset stays categorical on retrain"

finish
