#!/bin/bash
# Strings from users and files reach the terminal escaped (issue 29): a file
# name holding a carriage return and ESC[K (erase to end of line), a column
# name and a category holding ESC and C1 bytes, a config file name holding a
# newline. In text output every such byte is shown as an escape (\r, \n,
# \x1b, \xc2\x9b) by audit log, data show, jobs show, jobs logs and the
# one-line errors; --json output keeps the exact strings. Before the fix,
# `audit log` printed the recorded command line raw, and the terminal showed
# a harmless command in place of the real one.
. "$E2E_LIB"

# raw_controls LABEL TEXT: TEXT holds no byte a terminal acts on (C0 but
# the newline, DEL, or a C1 control in UTF-8).
raw_controls() {
  if printf '%s' "$2" | LC_ALL=C grep -q "$(printf '[\001-\011\013-\037\177]')" ||
     printf '%s' "$2" | LC_ALL=C grep -q "$(printf '\302[\200-\237]')"; then
    fail "$1: raw control bytes in: $(printf '%s' "$2" | od -c | head -5)"
  else
    pass
  fi
}

evil_csv="$WORK/innocent.csv"$'\r\033[K'"evil.csv"
cp "$TEST_DATA/iris.csv" "$evil_csv"
expect_rc 0 init
expect_rc 0 data import iris "$evil_csv"

expect_rc 0 audit log
raw_controls "audit log" "$OUT"
expect_contains "$OUT" 'innocent.csv\r\x1b[Kevil.csv' "audit log shows the CR and ESC escaped"
expect_rc 0 --json audit log
expect_eq "$(json_get "[r['command'] for r in j['records'] if r['action'] == 'dataset.import'][0]" |
  grep -c $'innocent.csv\r\033\\[Kevil.csv')" "1" "audit log --json keeps the exact command line"

# A name that is not UTF-8 at all: text shows the byte escaped, --json
# (UTF-8 only) a replacement character instead of failing the document.
latin1_csv="$WORK/caf"$'\xe9'".csv"
cp "$TEST_DATA/iris.csv" "$latin1_csv"
expect_rc 0 data import latin1 "$latin1_csv"
expect_rc 0 audit log
expect_contains "$OUT" 'caf\xe9.csv' "audit log shows a non-UTF-8 byte escaped"
expect_rc 0 --json audit log
expect_contains "$(json_get "[r['command'] for r in j['records'] if 'latin1' in r['command']][0]")" \
  $'caf\xef\xbf\xbd.csv' "audit log --json replaces a non-UTF-8 byte"

expect_rc 0 data show iris
raw_controls "data show" "$OUT"
expect_contains "$OUT" 'innocent.csv\r\x1b[Kevil.csv' "data show: the source file's name escaped"

# A column and a category with ESC, a C1 CSI (U+009B) and a bidi override.
{
  printf 'a\033[2Jb,c\302\233d,label\n'
  for i in $(seq 1 30); do printf '%d,%d,x\033]0;title\007y\n' "$i" "$((i % 3))"; printf '%d,%d,plain\342\200\256txt\n' "$((i + 1))" "$i"; done
} > "$WORK/columns.csv"
expect_rc 0 data import cols "$WORK/columns.csv" --label label --categorical 'c'$'\302\233''d'
expect_rc 0 data show cols
raw_controls "data show (columns)" "$OUT"
expect_contains "$OUT" 'a\x1b[2Jb' "a column name's ESC escaped"
expect_contains "$OUT" 'c\xc2\x9bd' "a column name's C1 control escaped"
expect_contains "$OUT" 'x\x1b]0;title\x07y' "a category's OSC sequence escaped"
expect_contains "$OUT" 'plain\xe2\x80\xaetxt' "a bidi override escaped"
expect_rc 0 --json data show cols
expect_contains "$OUT" '"a\u001b[2Jb"' "data show --json keeps the exact column name"

# Errors name the path as given: escaped.
run data import other "$WORK/missing"$'\r\033[K'"name.csv"
expect_eq "$RC" 2 "importing a missing file is refused"
raw_controls "error naming a path" "$ERR"
expect_contains "$ERR" 'missing\r\x1b[Kname.csv' "the error shows the path escaped"

# A job whose config file's name holds a newline and an ESC: jobs show and
# a worker's notes; its log as jobs logs shows it.
cfg="$WORK/job"$'\n\033[31m'"red.ini"
iris_config "$cfg" escjob
expect_rc 0 submit "$cfg"
expect_rc 0 jobs show job-1
raw_controls "jobs show" "$OUT"
expect_contains "$OUT" 'job\n\x1b[31mred.ini' "jobs show: the config path escaped"
expect_rc 0 worker --cores 1 --drain
raw_controls "worker notes" "$ERR"
expect_rc 0 --json jobs show job-1
log=$(json_get "j['log']")
printf 'plain line\n\033[2Ja line with ESC\r\n' >> "$log"
expect_rc 0 jobs logs job-1
raw_controls "jobs logs" "$OUT"
expect_contains "$OUT" '\x1b[2Ja line with ESC\r' "jobs logs: a log line's controls escaped"

finish
