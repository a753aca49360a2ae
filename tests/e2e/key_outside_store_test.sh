#!/bin/bash
# A key file is never inside the store it encrypts (issue 29): encrypt,
# init --encrypt, rekey (both keys) and every command that opens an
# encrypted store refuse a key path that resolves, symbolic links followed,
# into the store: one line naming where the path came from (--key-file,
# --new-key-file, $ANNEAL_KEY_FILE) and the path, exit 2, and nothing is
# written. Before the fix `encrypt --key-file STORE/tmp/store.key` was
# accepted and the next gc deleted the only copy of the key.
. "$E2E_LIB"

one_line() {  # one_line LABEL: stderr is a single line
  if [ "$(printf '%s\n' "$ERR" | wc -l)" -eq 1 ]; then pass; else fail "$1: expected one line, got: $ERR"; fi
}
refused() {  # refused LABEL SOURCE PATH: the last command was refused for a key inside the store
  if [ "$RC" -ne 2 ]; then fail "$1: exited $RC, expected 2; stderr: $ERR"; else pass; fi
  one_line "$1"
  expect_contains "$ERR" "$2 $3: the key file lies inside the store" "$1: names the source and the path"
}

expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
mkdir -p "$WORK/keys"

# encrypt with a new key in the store's tmp/ (gc empties it), in the store's
# root, through a link to a directory of the store, and from the environment.
for key in "$ANNEAL_HOME/tmp/store.key" "$ANNEAL_HOME/key" "$ANNEAL_HOME/objects/../key"; do
  run encrypt --key-file "$key"
  refused "encrypt --key-file $key" --key-file "$key"
  [ -e "$key" ] && fail "encrypt wrote $key before refusing it" || pass
done
ln -s "$ANNEAL_HOME/tmp" "$WORK/keys/via-link"
run encrypt --key-file "$WORK/keys/via-link/store.key"
refused "a key reached through a link into the store" --key-file "$WORK/keys/via-link/store.key"
ANNEAL_KEY_FILE="$ANNEAL_HOME/tmp/env.key" run encrypt
refused "\$ANNEAL_KEY_FILE in the store" '$ANNEAL_KEY_FILE' "$ANNEAL_HOME/tmp/env.key"
[ -e "$ANNEAL_HOME/encryption" ] && fail "a refused encrypt left the store encrypted" || pass
[ -n "$(ls -A "$ANNEAL_HOME/tmp")" ] && fail "a refused encrypt left files in tmp/: $(ls -A "$ANNEAL_HOME/tmp")" || pass

# init --encrypt of a new store with its key inside it: the store is not made.
run --store "$WORK/new-store" init --encrypt --key-file "$WORK/new-store/store.key"
refused "init --encrypt with the key inside the new store" --key-file "$WORK/new-store/store.key"
[ -e "$WORK/new-store" ] && fail "init --encrypt made the store before refusing its key" || pass

# Encrypted with a key outside: a copy of it inside the store opens nothing.
KEY="$WORK/keys/store.key"
expect_rc 0 encrypt --key-file "$KEY"
cp "$KEY" "$ANNEAL_HOME/copy.key"
chmod 600 "$ANNEAL_HOME/copy.key"
run --key-file "$ANNEAL_HOME/copy.key" data list
refused "opening the store with a key inside it" --key-file "$ANNEAL_HOME/copy.key"
ANNEAL_KEY_FILE="$ANNEAL_HOME/copy.key" run data list
refused "\$ANNEAL_KEY_FILE inside the store" '$ANNEAL_KEY_FILE' "$ANNEAL_HOME/copy.key"
rm "$ANNEAL_HOME/copy.key"

# rekey: the new key may not be written into the store either.
run --key-file "$KEY" rekey --new-key-file "$ANNEAL_HOME/tmp/new.key"
refused "rekey --new-key-file in tmp/" --new-key-file "$ANNEAL_HOME/tmp/new.key"
[ -e "$ANNEAL_HOME/tmp/new.key" ] && fail "rekey wrote the new key into the store" || pass

# The store still opens with its key after gc.
expect_rc 0 --key-file "$KEY" gc
expect_rc 0 --key-file "$KEY" data list
expect_contains "$OUT" "iris" "the store reads with the key kept outside it"

finish
