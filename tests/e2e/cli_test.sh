#!/bin/bash
# The command line: help, version, usage errors, store location, permissions.
. "$E2E_LIB"

expect_rc 0 --help
expect_contains "$OUT" "data import" "--help lists commands"
expect_contains "$OUT" "65" "--help documents exit codes"
expect_rc 0 --version
expect_contains "$OUT" "commit" "--version names the commit"
expect_rc 0 data import --help
expect_contains "$OUT" "usage: anneal data import NAME FILE" "command help"
expect_rc 2
expect_rc 2 frobnicate
expect_contains "$ERR" "unknown command 'frobnicate'" "unknown command named"
expect_rc 2 dta list
expect_contains "$ERR" "did you mean 'data list'" "closest command suggested"
expect_rc 2 data list --bogus
expect_contains "$ERR" "--bogus" "bad flag named"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" "1" "usage errors are one line"

# Store location: --store, then $ANNEAL_HOME, then $XDG_DATA_HOME/anneal.
expect_rc 1 data list
expect_contains "$ERR" "no anneal store at $ANNEAL_HOME" "missing store is named"
expect_rc 0 init
[ -f "$ANNEAL_HOME/catalog.db" ] && pass || fail "ANNEAL_HOME store created"
expect_eq "$(stat -c %a "$ANNEAL_HOME")" "700" "store directory mode"
expect_eq "$(stat -c %a "$ANNEAL_HOME/catalog.db")" "600" "catalog mode"
expect_rc 0 init
expect_contains "$OUT" "already exists" "init is idempotent"
expect_rc 0 --store "$WORK/other" init
# Regression (issue 12): init on an existing 0755 directory left it 0755.
mkdir -m 0755 "$WORK/handmade"
expect_rc 0 --store "$WORK/handmade" init
expect_eq "$(stat -c %a "$WORK/handmade")" "700" "init makes an existing empty directory owner-only"
chmod 0755 "$WORK/handmade" "$WORK/handmade/objects"
chmod 0644 "$WORK/handmade/catalog.db"
expect_rc 0 --store "$WORK/handmade" init
expect_eq "$(stat -c %a "$WORK/handmade"):$(stat -c %a "$WORK/handmade/objects"):$(stat -c %a "$WORK/handmade/catalog.db")" \
  "700:700:600" "init on a loosened store makes it owner-only again"
# A directory holding other things is refused, and left as it was.
mkdir -m 0755 "$WORK/notastore" && echo keep > "$WORK/notastore/file.txt"
expect_rc 2 --store "$WORK/notastore" init
expect_contains "$ERR" "is not empty and holds no store" "init refuses a non-empty directory"
expect_eq "$(stat -c %a "$WORK/notastore"):$(ls "$WORK/notastore")" "755:file.txt" "and leaves it alone"
[ -f "$WORK/other/catalog.db" ] && pass || fail "--store wins over ANNEAL_HOME"
( unset ANNEAL_HOME; XDG_DATA_HOME="$WORK/xdg" "$ANNEAL" init >/dev/null ) || fail "xdg init"
[ -f "$WORK/xdg/anneal/catalog.db" ] && pass || fail "XDG_DATA_HOME/anneal used"
( unset ANNEAL_HOME XDG_DATA_HOME; HOME="$WORK/home" "$ANNEAL" init >/dev/null ) || fail "home init"
[ -f "$WORK/home/.local/share/anneal/catalog.db" ] && pass || fail "~/.local/share/anneal used"

# --json before or after the command gives one JSON document.
expect_rc 0 --json data list
expect_eq "$(json_get 'len(j["datasets"])')" "0" "empty list as JSON"
expect_rc 0 data list --json
expect_eq "$(json_get 'type(j).__name__')" "dict" "--json after the command"
expect_rc 0 fsck --json
expect_eq "$(json_get 'j["ok"]')" "True" "fsck of an empty store"

finish
