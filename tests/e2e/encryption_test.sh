#!/bin/bash
# Encryption at rest, end to end: init --encrypt writes a new owner-only key;
# import, train, predict, export and fsck work with the key (flag,
# $ANNEAL_KEY_FILE, a job worker's children); without it, with a wrong one
# or with a key file others may read, each command is one line, exit 1;
# object files hold no plaintext; the same data imported twice stores no new
# object; a changed ciphertext byte is BROKEN in fsck; `anneal encrypt` of a
# plaintext store killed half way still reads and a rerun finishes; `anneal
# rekey` killed half way is refused until its rerun finishes. The audit
# trail: init --encrypt, encrypt and rekey each append one record (keys
# elided from its command line, never in it), also when killed between the
# key switch and the record (the rerun records it; until then audit verify
# fails and fsck notes it); audit log and verify need no key; fsck of an
# encrypted store checks the chain.
. "$E2E_LIB"

one_line() {  # one_line LABEL: stderr is a single line
  if [ "$(printf '%s\n' "$ERR" | wc -l)" -eq 1 ]; then pass; else fail "$1: expected one line, got: $ERR"; fi
}
# versions DIR: the format version byte of every object file, counted ("1 N" / "2 N").
versions() {
  find "$1/objects" -type f -exec python3 -c '
import sys, collections
print(" ".join(f"v{k}:{v}" for k, v in sorted(collections.Counter(open(p, "rb").read()[4] for p in sys.argv[1:]).items())))' {} +
}
count_objects() { find "$1/objects" -type f | wc -l; }
# shows_text DIR TEXT: whether TEXT is in any object file of DIR, as it is
# or once whatever follows a plaintext object's 16-byte header is
# decompressed (zstd codes literals, so plain grep alone proves little).
shows_text() {
  local f
  for f in $(find "$1/objects" -type f); do
    grep -q "$2" "$f" && return 0
    tail -c +17 "$f" | zstd -dqc 2>/dev/null | grep -q "$2" && return 0
  done
  return 1
}

KEY="$WORK/keys/store.key"
mkdir -p "$WORK/keys"
expect_rc 0 init --encrypt --key-file "$KEY"
expect_contains "$OUT" "encrypted with key" "init --encrypt says so"
expect_contains "$ERR" "wrote a new key" "init --encrypt created the key file"
expect_eq "$(stat -c %a "$KEY")" "600" "the new key file is owner-only"
expect_eq "$(head -c 64 "$KEY" | tr -d '0-9a-f' | wc -c)" "0" "the key file is 64 hex digits"
expect_eq "$(stat -c %a "$ANNEAL_HOME/encryption")" "600" "the store's record is owner-only"
if grep -q "$(head -c 64 "$KEY")" "$ANNEAL_HOME/encryption"; then fail "the record holds the key"; else pass; fi

# Import with the flag; the CSV's text is nowhere in the object files.
expect_rc 0 --key-file "$KEY" data import iris "$TEST_DATA/iris.csv"
if shows_text "$ANNEAL_HOME" versicolor; then fail "an object file holds plaintext"; else pass; fi
expect_eq "$(versions "$ANNEAL_HOME")" "v2:$(count_objects "$ANNEAL_HOME")" "every object is encrypted (version 2)"

# No key, a wrong key, a key others may read, a key file that is no key:
# one line each, exit 1, and nothing is changed.
before=$(store_state)
expect_rc 1 data list
one_line "no key"
expect_contains "$ERR" "the store is encrypted; give its key with --key-file" "no key: says how to give one"
python3 -c 'import secrets; print(secrets.token_hex(32))' > "$WORK/keys/wrong.key"
chmod 600 "$WORK/keys/wrong.key"
expect_rc 1 --key-file "$WORK/keys/wrong.key" data export iris -o "$WORK/x.csv"
one_line "wrong key"
expect_contains "$ERR" "wrong key" "a wrong key is named as such, not as damage"
ANNEAL_KEY_FILE="$WORK/keys/wrong.key" expect_rc 1 fsck
expect_contains "$ERR" "wrong key: the key file (\$ANNEAL_KEY_FILE)" "\$ANNEAL_KEY_FILE is read, and named as the source"
cp "$KEY" "$WORK/keys/open.key"
chmod 644 "$WORK/keys/open.key"
expect_rc 1 --key-file "$WORK/keys/open.key" data list
one_line "world-readable key"
expect_contains "$ERR" "must be owner-only" "a key file others may read is refused"
echo "hello" > "$WORK/keys/junk.key"
chmod 600 "$WORK/keys/junk.key"
expect_rc 1 --key-file "$WORK/keys/junk.key" data list
expect_contains "$ERR" "expected 64 hex digits" "a key file that holds no key"
expect_rc 1 --key-file "$WORK/keys/absent.key" data list
expect_contains "$ERR" "does not exist" "a key file that does not exist"
expect_rc 1 init --encrypt --key-file "$WORK/keys/typo.key"
expect_contains "$ERR" "already encrypted" "init --encrypt of an encrypted store with a key file that does not exist"
[ -e "$WORK/keys/typo.key" ] && fail "a stray key file was written for an encrypted store" || pass
expect_rc 0 init --encrypt --key-file "$KEY"
expect_contains "$OUT" "is encrypted with key" "init --encrypt again with the store's key: nothing to do"
expect_eq "$(store_state)" "$before" "refused commands changed nothing"

export ANNEAL_KEY_FILE="$KEY"
# Dedup on the plaintext hash: the same bytes under another name add no object.
objects_before=$(count_objects "$ANNEAL_HOME")
expect_rc 0 data import iris-again "$TEST_DATA/iris.csv"
expect_eq "$(count_objects "$ANNEAL_HOME")" "$objects_before" "importing the same data again stores no new object"

# Train, predict, export: the plaintext comes back out.
iris_config "$WORK/m.ini" iris-m "epochs = 3" "checkpoint_every = 2"
expect_rc 0 train "$WORK/m.ini"
cut -d, -f1-4 "$TEST_DATA/iris.csv" > "$WORK/in.csv"
expect_rc 0 --json predict iris-m --input "$WORK/in.csv" -o "$WORK/pred.csv"
expect_eq "$(json_get 'j["rows"]')" "150" "predict with the key"
expect_rc 0 data export iris -o "$WORK/out.csv"
if cmp -s "$WORK/out.csv" "$TEST_DATA/iris.csv"; then pass; else fail "export is not the imported file"; fi
expect_eq "$(versions "$ANNEAL_HOME")" "v2:$(count_objects "$ANNEAL_HOME")" "models and checkpoints are encrypted too"
expect_rc 0 fsck

# docs/STORE.md is enough to decrypt: an independent reader written from it
# (tests/format/decrypt_object.py, libsodium through ctypes) checks the key
# and decrypts every object to bytes whose hash is its name, objects of
# several 64 KiB messages included (random numbers barely compress).
READER="$(cd "$(dirname "$E2E_LIB")/../format" && pwd)/decrypt_object.py"
python3 -c '
import random
random.seed(5)
print("a,b,c,d,e,f,label")
for i in range(6000): print(",".join("%.9f" % random.random() for _ in range(6)) + ",%d" % (i % 3))' > "$WORK/noise.csv"
expect_rc 0 data import noise "$WORK/noise.csv"
largest=$(find "$ANNEAL_HOME/objects" -type f -printf '%s\n' | sort -n | tail -1)
[ "$largest" -gt 140000 ] && pass || fail "no object spans three messages (largest $largest bytes)"
expect_eq "$(python3 "$READER" check "$KEY" "$ANNEAL_HOME")" "key matches" "the independent reader's key check"
reader_out=$(python3 "$READER" verify "$KEY" "$ANNEAL_HOME")
expect_eq "${reader_out##*, }" "0 bad" "the independent reader decrypts every object: $reader_out"
if python3 "$READER" check "$WORK/keys/wrong.key" "$ANNEAL_HOME" > /dev/null; then fail "reader: a wrong key matched"; else pass; fi

# The systemd credential: $CREDENTIALS_DIRECTORY/anneal-key (mode 0400, as
# systemd makes it), when neither --key-file nor $ANNEAL_KEY_FILE is given.
unset ANNEAL_KEY_FILE
mkdir "$WORK/credentials"
cp "$KEY" "$WORK/credentials/anneal-key"
chmod 400 "$WORK/credentials/anneal-key"
CREDENTIALS_DIRECTORY="$WORK/credentials" expect_rc 0 data show iris
rm -f "$WORK/credentials/anneal-key"
cp "$WORK/keys/wrong.key" "$WORK/credentials/anneal-key"
CREDENTIALS_DIRECTORY="$WORK/credentials" expect_rc 1 data show iris
expect_contains "$ERR" "the key file (systemd credential anneal-key)" "a wrong credential is named as such"

# The worker hands --key-file to its job processes.
iris_config "$WORK/j.ini" iris-j "epochs = 1"
expect_rc 0 --key-file "$KEY" submit "$WORK/j.ini"
expect_rc 0 --key-file "$KEY" worker --cores 1 --drain
expect_rc 0 --key-file "$KEY" --json jobs list
expect_eq "$(json_get '[x["state"] for x in j["jobs"]]')" "['succeeded']" "a job ran in an encrypted store"
export ANNEAL_KEY_FILE="$KEY"

# A changed ciphertext byte: fsck names the object as damaged.
object=$(find "$ANNEAL_HOME/objects" -type f | sort | head -1)
cp "$object" "$WORK/saved-object"
python3 - "$object" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)
PY
expect_rc 1 fsck
expect_contains "$OUT" "BROKEN object $(basename "$object")" "a tampered object is reported as damage"
expect_contains "$OUT" "authentication failed" "and why"
cp "$WORK/saved-object" "$object"
expect_rc 0 fsck

# --- anneal encrypt of a plaintext store, killed half way -------------------
unset ANNEAL_KEY_FILE
export ANNEAL_HOME="$WORK/plain"
expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
expect_rc 0 train "$WORK/m.ini"
n=$(count_objects "$ANNEAL_HOME")
if shows_text "$ANNEAL_HOME" versicolor; then pass; else fail "control: a plaintext store shows its CSV text"; fi
expect_rc 2 --key-file "$KEY" data list
expect_contains "$ERR" "is not encrypted; 'anneal encrypt --key-file FILE' encrypts it" \
  "--key-file on a plaintext store is refused rather than ignored"
ANNEAL_KEY_FILE="$KEY" expect_rc 0 data list
KEY2="$WORK/keys/second.key"
use_fault_build
ANNEAL_FAULT="encrypt.object-rewritten@3=crash" expect_rc 137 encrypt --key-file "$KEY2"
expect_eq "$(versions "$ANNEAL_HOME")" "v1:$((n - 3)) v2:3" "killed after 3 objects: plaintext and encrypted side by side"
expect_rc 1 data list
expect_contains "$ERR" "the store is encrypted" "from the first object on, the store needs its key"
expect_rc 0 --key-file "$KEY2" fsck
expect_contains "$OUT" ": ok" "a half-encrypted store reads whole"
expect_contains "$OUT" "NOTE $((n - 3)) objects are not encrypted yet" "fsck notes what is left to encrypt"
expect_rc 0 --key-file "$KEY2" encrypt
expect_contains "$OUT" "encrypted $((n - 3)) objects" "the rerun finishes the job"
expect_eq "$(versions "$ANNEAL_HOME")" "v2:$n" "every object encrypted"
if shows_text "$ANNEAL_HOME" versicolor; then fail "plaintext left after encrypt"; else pass; fi
expect_rc 0 --key-file "$KEY2" encrypt
expect_contains "$OUT" "encrypted 0 objects" "a third run has nothing to do"
expect_rc 1 --key-file "$KEY" encrypt
expect_contains "$ERR" "'anneal rekey' changes the key" "encrypt with another key is refused"
expect_rc 0 --key-file "$KEY2" data export iris -o "$WORK/out2.csv"
if cmp -s "$WORK/out2.csv" "$TEST_DATA/iris.csv"; then pass; else fail "export after encrypt differs"; fi

# --- anneal rekey, killed half way ------------------------------------------
KEY3="$WORK/keys/third.key"
ANNEAL_FAULT="rekey.object-rewritten@2=crash" expect_rc 137 --key-file "$KEY2" rekey --new-key-file "$KEY3"
expect_eq "$(stat -c %a "$KEY3")" "600" "rekey wrote the new key first"
expect_rc 1 --key-file "$KEY3" data list
one_line "interrupted rekey"
expect_contains "$ERR" "a key rotation was interrupted; run 'anneal rekey' again" "an unfinished rekey is refused, saying how to finish"
expect_rc 1 --key-file "$KEY" rekey --new-key-file "$KEY3"
expect_contains "$ERR" "wrong key" "rekey with a key that is neither"
# A rerun naming a key file that does not exist cannot finish the rotation:
# refused before any new key file is written (issue 29).
expect_rc 2 --key-file "$KEY2" rekey --new-key-file "$WORK/typo.key"
expect_contains "$ERR" "a key rotation was interrupted" "a rerun with a missing new key is refused"
[ ! -e "$WORK/typo.key" ] && pass || fail "the refused rerun wrote a new key file"
expect_rc 0 --key-file "$KEY2" rekey --new-key-file "$KEY3"
expect_contains "$OUT" "re-encrypted $((n - 2)) objects" "the rerun finishes the rotation"
expect_rc 1 --key-file "$KEY2" data list
expect_contains "$ERR" "wrong key" "the old key no longer opens the store"
expect_rc 0 --key-file "$KEY3" fsck
expect_contains "$OUT" ": ok" "everything reads with the new key"
expect_rc 0 --key-file "$KEY3" data export iris -o "$WORK/out3.csv"
if cmp -s "$WORK/out3.csv" "$TEST_DATA/iris.csv"; then pass; else fail "export after rekey differs"; fi
# --- the audit trail of init --encrypt, encrypt and rekey ----------------------
# last_record FIELD: that field of the newest audit record (no key needed).
last_record() {
  "$ANNEAL" --json audit log | python3 -c "import json,sys; r=json.load(sys.stdin)['records'][-1]; v=r['$1']; print(json.dumps(v, sort_keys=True) if isinstance(v, dict) else v)"
}
records() { "$ANNEAL" --json audit log | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["records"]))'; }
detail() { last_record detail | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
# key_id FILE: the key's id as docs/STORE.md defines it, computed here.
key_id() {
  python3 -c 'import hashlib, sys; k = bytes.fromhex(open(sys.argv[1]).read().strip())
print(hashlib.blake2b(b"anneal key check v1", digest_size=32, key=k).hexdigest()[:16])' "$1"
}
# no_secret LABEL: neither a key file's path nor a key is in the catalog.
no_secret() {
  local k
  for k in "$WORK"/keys/*.key; do
    if grep -qaF -e "$(basename "$k")" -e "$(head -c 64 "$k")" "$ANNEAL_HOME/catalog.db" "$ANNEAL_HOME"/catalog.db-wal 2>/dev/null; then
      fail "$1: the catalog holds key file $(basename "$k") or its key"
    else pass; fi
  done
}
unset ANNEAL_KEY_FILE

# The first store: its first record is init --encrypt's; then the rerun of
# init --encrypt (nothing to do) recorded nothing.
export ANNEAL_HOME="$WORK/store"
expect_rc 0 --json audit log
expect_eq "$(json_get 'j["records"][0]["action"]')" "store.encrypt" "init --encrypt is the first record"
expect_eq "$(json_get 'j["records"][0]["detail"]["objects_rewritten"]')" "0" "a new store had no object to encrypt"
expect_eq "$(json_get 'j["records"][0]["command"]')" "anneal init --encrypt --key-file <elided>" \
  "init --encrypt's command line, its key file elided"
expect_eq "$(json_get 'sum(r["action"] == "store.encrypt" for r in j["records"])')" "1" \
  "init --encrypt again with the store's key recorded nothing"
expect_rc 0 audit verify
expect_contains "$OUT" "audit chain ok" "audit verify of an encrypted store, without its key"
# fsck of an encrypted store runs the chain check: an edited record is damage.
cp "$ANNEAL_HOME/catalog.db" "$WORK/catalog.saved"
python3 - "$ANNEAL_HOME/catalog.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE audit SET user = 'mallory' WHERE seq = 1")
db.commit()
PY
expect_rc 1 --key-file "$KEY" fsck
expect_contains "$OUT$ERR" "audit record 1" "fsck of an encrypted store names the edited audit record"
expect_rc 1 audit verify
expect_contains "$ERR" "audit record 1" "and so does audit verify, without the key"
cp "$WORK/catalog.saved" "$ANNEAL_HOME/catalog.db"
expect_rc 0 --key-file "$KEY" fsck
expect_contains "$OUT" ": ok" "fsck of the encrypted store, chain restored"

# The plaintext store of the sections above: its encrypt (killed, then
# finished) and rekey (killed, then finished) are one record each.
export ANNEAL_HOME="$WORK/plain"
expect_rc 0 --json audit log
expect_eq "$(json_get '[r["action"] for r in j["records"] if r["action"].startswith("store.")]')" \
  "['store.encrypt', 'store.rekey']" "one record for the encrypt, one for the rekey; the killed runs none"
expect_eq "$(json_get '[r["detail"]["objects_rewritten"] for r in j["records"] if r["action"].startswith("store.")]')" \
  "[$((n - 3)), $((n - 2))]" "each names what its run rewrote"
expect_eq "$(detail key_id)" "$(key_id "$KEY3")" "the rekey record names the new key's id"
expect_eq "$(detail old_key_id)" "$(key_id "$KEY2")" "and the old one's"
expect_eq "$(detail key_check)" "$(sed -n 's/^key //p' "$ANNEAL_HOME/encryption")" \
  "its key check is the one STORE/encryption holds"
expect_eq "$(last_record command)" "$(basename "$ANNEAL") --key-file <elided> rekey --new-key-file <elided>" \
  "rekey's command line, both key files elided"
no_secret "after encrypt and rekey"
expect_rc 0 audit verify
expect_rc 0 --key-file "$KEY2" audit verify  # the catalog alone: a key given is not needed, nor checked
# A rekey killed after its switch to the new key, before its record.
KEY6="$WORK/keys/sixth.key"
before=$(records)
ANNEAL_FAULT="rekey.key-switched=crash" expect_rc 137 --key-file "$KEY3" rekey --new-key-file "$KEY6"
expect_rc 0 --key-file "$KEY6" data list  # switched: the new key opens the store
expect_eq "$(records)" "$before" "the killed rekey wrote no record"
expect_rc 1 audit verify
expect_contains "$ERR" "encrypted with key $(key_id "$KEY6")" "audit verify names the key the store is under"
expect_contains "$ERR" "the last store.encrypt or store.rekey record names key $(key_id "$KEY3")" "and the recorded one"
expect_rc 0 --key-file "$KEY3" rekey --new-key-file "$KEY6"
expect_eq "$(records)" "$((before + 1))" "the rerun records the rotation"
expect_eq "$(last_record action) $(detail objects_rewritten) $(detail key_id)" "store.rekey 0 $(key_id "$KEY6")" \
  "as store.rekey to the new key, with nothing left to rewrite"
expect_rc 0 audit verify

# Killed after the switch, before the record: audit verify fails naming the
# change, fsck notes it, and the rerun (nothing left to rewrite) records it.
export ANNEAL_HOME="$WORK/window"
expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
m=$(count_objects "$ANNEAL_HOME")
before=$(records)
KEY4="$WORK/keys/fourth.key"
ANNEAL_FAULT="encrypt.object-rewritten@$m=crash" expect_rc 137 encrypt --key-file "$KEY4"
expect_eq "$(versions "$ANNEAL_HOME")" "v2:$m" "killed after its last object: every object is encrypted"
expect_eq "$(records)" "$before" "and its record is not written"
expect_rc 1 audit verify
one_line "unrecorded encrypt"
expect_contains "$ERR" "no store.encrypt or store.rekey record says so" "audit verify names the unrecorded key switch"
expect_contains "$ERR" "running it again with the store's key finishes and records it" "and what records it"
expect_rc 1 --json audit verify
expect_eq "$(json_get '[j["ok"], j["problem"], j["unrecorded"] is not None]')" "[False, None, True]" \
  "--json: the chain is intact, the change unrecorded"
expect_rc 0 --key-file "$KEY4" fsck
expect_contains "$OUT" "NOTE audit trail: the store is encrypted with key $(key_id "$KEY4")" "fsck notes it"
expect_rc 0 --key-file "$KEY4" encrypt
expect_contains "$OUT" "encrypted 0 objects" "the rerun has nothing left to rewrite"
expect_eq "$(records)" "$((before + 1))" "the rerun records the switch"
expect_eq "$(last_record action)" "store.encrypt" "as store.encrypt"
expect_eq "$(detail key_id)" "$(key_id "$KEY4")" "naming the key"
expect_rc 0 audit verify
expect_rc 0 --key-file "$KEY4" fsck
if printf '%s' "$OUT" | grep -q "NOTE audit trail"; then fail "fsck still notes the recorded switch"; else pass; fi
expect_rc 0 --key-file "$KEY4" encrypt
expect_eq "$(records)" "$((before + 1))" "a run that changes nothing records nothing"

# init --encrypt of an existing plaintext store, the key by --key-file=FILE.
export ANNEAL_HOME="$WORK/later"
expect_rc 0 init
expect_rc 0 data import iris "$TEST_DATA/iris.csv"
m=$(count_objects "$ANNEAL_HOME")
expect_rc 0 init --encrypt "--key-file=$WORK/keys/fifth.key"
expect_eq "$(last_record action)" "store.encrypt" "init --encrypt of a plaintext store is recorded"
expect_eq "$(detail objects_rewritten)" "$m" "with the objects it encrypted"
expect_eq "$(last_record command)" "$(basename "$ANNEAL") init --encrypt --key-file=<elided>" "--key-file=FILE elided too"
no_secret "after init --encrypt"
expect_rc 0 audit verify
finish
