#!/bin/bash
# The HTML run report (runs report, model show --report, retrain
# --report-dir): one self-contained page that validates (HTML Tidy and
# html5lib's strict parser), loads nothing, escapes user data (a column
# named <script>, a class named <img ...>, control characters), and
# that a real browser renders with its curves drawn: headless Chromium
# screenshots it and the test counts the curve colours' pixels in the plot
# areas (positions fixed by run_report.h). Without Chromium, Tidy or the
# Python modules the rest still runs and the test exits 77 saying what was
# skipped. The last screenshot and its page stay in $REPORT_OUT
# (build/tests/report/report.png and report.html) to look at.
source "$E2E_LIB"

PY=/usr/bin/python3
SKIPPED=()
OUTDIR=${REPORT_OUT:-$WORK/report-out}
mkdir -p "$OUTDIR"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv" --seed 1
cat > "$WORK/iris.ini" <<'EOF'
name = iris-mlp
dataset = iris
layers = dense(16) relu dense(3)
loss = softmax_ce
optimizer = adam
lr = 0.02
batch = 16
epochs = 25
seed = 1
threads = 1
validation = 0.25
checkpoint_every = 7
keep_checkpoints = 2
EOF
expect_rc 0 train "$WORK/iris.ini"
RUN=$(latest_run)

# --- runs report: the file, its refusals -------------------------------------
R="$WORK/report.html"
expect_rc 0 runs report "$RUN" -o "$R"
expect_contains "$OUT" "wrote the report of $RUN to $R" "report says where"
[ -s "$R" ] && pass || fail "runs report wrote no file"
for needle in 'id="loss-curve"' 'id="accuracy-curve"' 'id="confusion"' 'class="best-checkpoint"' \
              'data-series="validation"' 'iris-mlp@v1' 'iris@v1' 'petal_length_(cm)' 'samples/s' 'lr = 0.02'; do
  expect_contains "$(cat "$R")" "$needle" "the report holds $needle"
done
# Self-contained: nothing to fetch or run.
for bad in '<script' '<link' ' src=' 'url(' '@import' 'http://' 'https://'; do
  if grep -qiF -- "$bad" "$R"; then fail "the report contains '$bad'"; else pass; fi
done
expect_contains "$(cat "$R")" "Content-Security-Policy" "the page forbids loading anything"
before=$(sha256sum < "$R")
expect_rc 2 runs report "$RUN" -o "$R"
expect_contains "$ERR" "file exists" "an existing report is not replaced"
expect_contains "$ERR" "--force" "the refusal names --force"
expect_eq "$(sha256sum < "$R")" "$before" "the refused write left the file as it was"
expect_rc 0 runs report "$RUN" -o "$R" --force
expect_rc 2 runs report "$RUN" -o "$WORK/no/such/dir/report.html"
expect_contains "$ERR" "no such directory" "a missing directory is named"
expect_rc 1 runs report run-99 -o "$WORK/r99.html"
expect_contains "$ERR" "run-99" "an unknown run is named"
[ -e "$WORK/r99.html" ] && fail "a failed report left a file" || pass
expect_rc 2 runs report "$RUN"
expect_contains "$ERR" "-o" "runs report without -o says what is missing"
expect_rc 2 runs report not-a-run -o "$WORK/x.html"
run --json runs report "$RUN" -o "$WORK/report-json.html"
expect_eq "$(json_get "j['report']")" "$WORK/report-json.html" "--json names the file"

# --- model show --report: the report of the run that registered the model ---
expect_rc 0 model show iris-mlp --report -o "$WORK/model.html"
if cmp -s "$R" "$WORK/model.html"; then pass; else fail "model show --report differs from runs report of $RUN"; fi
expect_rc 2 model show iris-mlp -o "$WORK/model2.html"
expect_contains "$ERR" "--report" "-o without --report says so"

# --- a quantized model: compared with its parent --------------------------------
expect_rc 0 quantize iris-mlp --int8 --calib iris --calib-samples 50
QRUN=$(latest_run)
expect_rc 0 runs report "$QRUN" -o "$WORK/quantized.html"
Q=$(cat "$WORK/quantized.html")
expect_contains "$Q" 'id="parent"' "a quantized model's report compares it with its parent"
expect_contains "$Q" "Compared with the parent iris-mlp@v1" "naming the parent"
expect_contains "$Q" "size on disk" "sizes side by side"
expect_contains "$Q" "int8" "its precision"
expect_contains "$Q" "recorded no epochs" "no curves, and it says why"
expect_contains "$Q" 'id="confusion"' "the int8 model's confusion matrix"
expect_contains "$Q" 'id="confusion-parent-test"' "beside its parent's on the same rows"

# --- hostile names: escaped, never markup -----------------------------------------
{
  # Control characters (C0 and C1) and a noncharacter are valid UTF-8, so
  # the import keeps them, but HTML allows none of them.
  printf '<script>alert(1)</script>,sepal_width,"a ""quoted"" & <b>bold</b>",ctl\x01\xc2\x85\xef\xb7\x90raw,species\n'
  tail -n +2 "$TEST_DATA/iris.csv" | sed -e 's/,setosa$/,<img src=x onerror=alert(1)>/'
} > "$WORK/hostile.csv"
expect_rc 0 data import hostile "$WORK/hostile.csv" --seed 1
cat > "$WORK/hostile.ini" <<'EOF'
name = hostile
dataset = hostile
layers = dense(8) relu dense(3)
lr = 0.02
batch = 16
epochs = 3
seed = 1
threads = 1
validation = 0.25
EOF
expect_rc 0 train "$WORK/hostile.ini"
H="$WORK/hostile.html"
expect_rc 0 runs report "$(latest_run)" -o "$H"
if grep -qiF '<script' "$H"; then fail "a column named <script> made it into the page as markup"; else pass; fi
if grep -qiF '<img' "$H"; then fail "a class named <img ...> made it into the page as markup"; else pass; fi
if grep -qF '<b>bold' "$H"; then fail "a column named <b> made it into the page as markup"; else pass; fi
expect_contains "$(cat "$H")" "&lt;script&gt;alert(1)&lt;/script&gt;" "the column name is shown, escaped"
expect_contains "$(cat "$H")" "&lt;img src=x onerror=alert(1)&gt;" "the class name is shown, escaped"
expect_contains "$(cat "$H")" $'ctl\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdraw' "characters HTML does not allow are shown as U+FFFD"

# --- a regression run (no accuracy), a linear model (no epochs) -----------------
expect_rc 0 data import sales "$TEST_DATA/sales.csv" --label unit_price --seed 1
cat > "$WORK/sales.ini" <<'EOF'
name = sales-mlp
dataset = sales
layers = dense(8) relu dense(1)
loss = mse
batch = 256
epochs = 2
seed = 1
threads = 1
validation = 0.2
EOF
expect_rc 0 train "$WORK/sales.ini"
expect_rc 0 runs report "$(latest_run)" -o "$WORK/regression.html"
G=$(cat "$WORK/regression.html")
expect_contains "$G" 'id="loss-curve"' "a regression run has its loss curve"
expect_contains "$G" "No accuracy: a regression run" "and says why there is no accuracy chart"
expect_contains "$G" "datetime" "the schema shows the date column's type"
case "$G" in *'id="accuracy-curve"'*) fail "a regression run drew an accuracy chart" ;; *) pass ;; esac
expect_rc 0 data import wine "$TEST_DATA/wine.csv" --seed 1
printf 'name = wine-linear\ndataset = wine\nlayers = linear\nthreads = 1\n' > "$WORK/wine.ini"
expect_rc 0 train "$WORK/wine.ini"
expect_rc 0 runs report "$(latest_run)" -o "$WORK/linear.html"
L=$(cat "$WORK/linear.html")
expect_contains "$L" "recorded no epochs" "a linear model has no curves, and it says why"
expect_contains "$L" 'id="confusion"' "but its confusion matrix"

# edit_summary RUN STATEMENT: runs the Python STATEMENT on RUN's recorded
# summary `s` (a dict) in the catalog, and stores the result back.
edit_summary() {
  "$PY" - "$ANNEAL_HOME/catalog.db" "${1#run-}" "$2" <<'EOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(summary,) = db.execute("SELECT summary_json FROM runs WHERE id = ?", (int(sys.argv[2]),)).fetchone()
s = json.loads(summary)
exec(sys.argv[3])
db.execute("UPDATE runs SET summary_json = ? WHERE id = ?", (json.dumps(s), int(sys.argv[2])))
db.commit()
EOF
}

# --- a run recorded before runs kept their confusion matrix ----------------------
edit_summary "$RUN" 'del s["confusion"]'
expect_rc 0 runs report "$RUN" -o "$WORK/old.html"
O=$(cat "$WORK/old.html")
expect_contains "$O" "No confusion matrix recorded" "an older run's report says the matrix is missing"
expect_contains "$O" 'id="loss-curve"' "and shows the rest"

# --- a damaged record: one line naming the run, no file ---------------------------
edit_summary "$RUN" 's["confusion"] = {"test": {"classes": 5, "matrix": "x"}}'
expect_rc 1 runs report "$RUN" -o "$WORK/damaged.html"
expect_contains "$ERR" "$RUN: its recorded summary" "a malformed record is named"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "in one line"
[ -e "$WORK/damaged.html" ] && fail "a failed report left a file" || pass

# --- retrain --report-dir: one report per night that trained --------------------
count_runs() { "$ANNEAL" --json runs list | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)['runs']))"; }
runs_before=$(count_runs)
expect_rc 2 retrain "$WORK/iris.ini" --report-dir "$WORK/nowhere"
expect_contains "$ERR" "--report-dir" "a missing report directory is refused"
expect_eq "$(count_runs)" "$runs_before" "before anything was trained"
mkdir -p "$WORK/served"
expect_rc 0 --json retrain "$WORK/iris.ini" --report-dir "$WORK/served" --if-changed
expect_eq "$(json_get "j['report']")" "$WORK/served/iris-mlp-v3.html" "retrain names its report"
[ -s "$WORK/served/iris-mlp-v3.html" ] && pass || fail "retrain wrote no report"
expect_contains "$(cat "$WORK/served/iris-mlp-v3.html")" 'id="loss-curve"' "the night's report has its curves"
expect_eq "$(count_runs)" "$((runs_before + 1))" "the night trained one run"
expect_rc 0 retrain "$WORK/iris.ini" --report-dir "$WORK/served" --if-changed
expect_contains "$OUT" "skipped" "an unchanged night is skipped"
expect_eq "$(ls "$WORK/served" | wc -l)" "1" "a skipped night writes no report"

# --- validation: HTML Tidy and html5lib's strict parser -------------------------
# Tidy is the validator (unknown elements and attributes, misnested or
# unclosed tags, bad entities, a missing title: exit 1 for warnings, 2 for
# errors); html5lib parses as browsers do by the WHATWG algorithm, and in
# strict mode raises on any parse error (stray characters, invalid code
# points, bad nesting in the SVG). The test also checks the parsed tree.
PAGES=("$R" "$WORK/quantized.html" "$H" "$WORK/regression.html" "$WORK/linear.html" "$WORK/old.html"
       "$WORK/served/iris-mlp-v3.html")
if command -v tidy >/dev/null; then
  for f in "${PAGES[@]}"; do
    if tidy -errors -q -utf8 "$f" > "$WORK/tidy.out" 2>&1; then pass; else fail "tidy on $(basename "$f"): $(cat "$WORK/tidy.out")"; fi
  done
else
  SKIPPED+=("tidy (Debian package tidy) is not installed")
fi
if "$PY" -c "import html5lib" 2>/dev/null; then
  for f in "${PAGES[@]}"; do
    if "$PY" - "$f" <<'EOF' > "$WORK/html5lib.out" 2>&1; then pass; else fail "html5lib on $(basename "$f"): $(cat "$WORK/html5lib.out")"; fi
import sys, html5lib
tree = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(open(sys.argv[1], "rb"))
tags = [e.tag for e in tree.iter() if isinstance(e.tag, str)]
bad = [t for t in tags if t.split("}")[-1] in ("script", "img", "link", "iframe", "object", "embed", "b")]
assert not bad, "elements from user data: %s" % bad
assert any(t.endswith("svg") for t in tags) or "recorded no epochs" in open(sys.argv[1]).read(), "no svg"
EOF
  done
else
  SKIPPED+=("python3-html5lib is not installed")
fi

# --- a real browser: headless Chromium renders the curves ------------------------
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
  SKIPPED+=("chromium is not installed: the page was not rendered")
elif ! "$PY" -c "import PIL" 2>/dev/null; then
  SKIPPED+=("python3-pil is not installed: the screenshot could not be read")
else
  cp "$R" "$OUTDIR/report.html"
  rm -f "$OUTDIR/report.png"
  sandbox=()
  [ "$(id -u)" -eq 0 ] && sandbox=(--no-sandbox)  # Chromium refuses to run as root with its sandbox
  # Its own profile and no network: the page must render from itself alone.
  # No time limit here (a slow machine must not turn this red); ctest's
  # TIMEOUT is what stops a hung browser.
  "$CHROMIUM" --headless "${sandbox[@]}" --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$WORK/chromium-profile" --proxy-server=127.0.0.1:9 --window-size=1400,2200 \
    --screenshot="$OUTDIR/report.png" "file://$OUTDIR/report.html" > "$WORK/chromium.log" 2>&1
  if [ ! -s "$OUTDIR/report.png" ]; then
    fail "chromium wrote no screenshot: $(tail -n 5 "$WORK/chromium.log")"
  elif "$PY" - "$OUTDIR/report.png" <<'EOF' > "$WORK/pixels.out" 2>&1; then pass; else fail "the rendered page: $(cat "$WORK/pixels.out")"; fi
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
px = img.load()
def count(box, rgb, tol=60):
    x0, y0, x1, y1 = box
    n = 0
    for y in range(y0, y1):
        for x in range(x0, x1):
            p = px[x, y]
            if all(abs(p[i] - rgb[i]) <= tol for i in range(3)):
                n += 1
    return n
# run_report.h: charts at (16, 72) and (672, 72), plot area x 64..624, y 40..272 in each.
train, val, mark = (0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e), (0xd6, 0x27, 0x28)
problems = []
for name, left in (("loss", 16), ("accuracy", 672)):
    box = (left + 64, 72 + 40, left + 624, 72 + 272)
    for series, rgb, least in (("train", train, 300), ("validation", val, 300), ("best checkpoint", mark, 80)):
        n = count(box, rgb)
        print(f"{name} chart: {n} {series} pixels")
        if n < least:
            problems.append(f"{name} chart: {n} pixels of the {series} colour, expected at least {least}")
# The page around the charts is blank: the colours come from the charts.
n = count((0, 400, 1400, 420), train) + count((0, 400, 1400, 420), val)
if n > 0:
    problems.append(f"{n} curve-coloured pixels below the charts (y 400..420): the layout moved")
# The confusion heat map: its dark-green shades somewhere below the charts.
green = sum(1 for y in range(400, img.size[1], 2) for x in range(0, img.size[0], 2)
            if px[x, y][1] > px[x, y][0] + 40 and px[x, y][1] > px[x, y][2] + 40)
print(f"heat map: {green} green sample pixels")
if green < 200:
    problems.append(f"heat map: {green} green pixels sampled, expected at least 200")
if problems:
    print("; ".join(problems))
    sys.exit(1)
EOF
  cat "$WORK/pixels.out"
fi

echo "$CHECKS checks passed, $FAILURES failed"
[ "$FAILURES" -eq 0 ] || exit 1
if [ ${#SKIPPED[@]} -gt 0 ]; then
  printf 'SKIPPED: %s\n' "${SKIPPED[@]}"
  exit 77
fi
exit 0
