#!/bin/bash
# Files anneal writes outside the store where the user asks (runs report -o,
# model export -o) follow the user's umask, and are owner-only when the
# store is encrypted (issue 29): before, both were made 0644 whatever the
# umask, from an encrypted store too. (The store's own files stay
# owner-only under any umask.)
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
iris_config "$WORK/iris.ini" iris-mlp "epochs = 2"
expect_rc 0 --json train "$WORK/iris.ini"
run_id=$(json_get 'j["run"]')

# mode_under UMASK KIND FILE ARGS...: the mode of FILE as `anneal ARGS`
# writes it under UMASK.
mode_under() {
  local mask=$1 file=$2
  shift 2
  rm -f "$file"
  (umask "$mask" && "$ANNEAL" "$@" >/dev/null 2>"$WORK/mode.err") || fail "anneal $* under umask $mask: $(cat "$WORK/mode.err")"
  stat -c %a "$file" 2>/dev/null
}
for mask in 022 027 077 002; do
  want=$(printf '%o' $(( 0666 & ~8#$mask )))
  expect_eq "$(mode_under "$mask" "$WORK/r.html" runs report "$run_id" -o "$WORK/r.html")" "$want" \
    "a report under umask $mask"
  expect_eq "$(mode_under "$mask" "$WORK/m.onnx" model export iris-mlp --format onnx -o "$WORK/m.onnx")" "$want" \
    "an ONNX export under umask $mask"
done
expect_eq "$(stat -c %a "$ANNEAL_HOME/catalog.db")" "600" "the store's own files stay owner-only"

# An encrypted store: what is written outside it is owner-only, whatever the umask.
mkdir -p "$WORK/keys"
expect_rc 0 encrypt --key-file "$WORK/keys/k"
for mask in 022 027 077; do
  want=$(printf '%o' $(( 0600 & ~8#$mask )))
  expect_eq "$(mode_under "$mask" "$WORK/r.html" --key-file "$WORK/keys/k" runs report "$run_id" -o "$WORK/r.html")" \
    "$want" "an encrypted store's report under umask $mask"
  expect_eq "$(mode_under "$mask" "$WORK/m.onnx" --key-file "$WORK/keys/k" model export iris-mlp --format onnx \
    -o "$WORK/m.onnx")" "$want" "an encrypted store's ONNX export under umask $mask"
done

finish
