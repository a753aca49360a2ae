#!/bin/bash
# The generated bash completion (`anneal --completion bash`) completes command
# words, subcommands, each command's options, and file names only where a
# command or option takes a file.
#   completion_test.sh COMPLETION_SCRIPT
set -u
script=$1
if [ ! -f /usr/share/bash-completion/bash_completion ]; then
  echo "bash-completion is not installed: run packaging/install-deps package" >&2
  exit 1
fi
. /usr/share/bash-completion/bash_completion
. "$script"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
touch iris.csv notes.txt
mkdir subdir

failures=0
# expect LINE WANT: completing at the end of LINE offers exactly WANT
# (space-separated, sorted).
expect() {
  local line=$1 want=$2 got
  COMP_LINE=$line
  COMP_POINT=${#line}
  read -ra COMP_WORDS <<<"$line"
  [[ $line == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _anneal 2>/dev/null
  got=$(printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//')
  if [ "$got" != "$want" ]; then
    echo "FAIL: '$line<TAB>' offers '$got', expected '$want'" >&2
    failures=$((failures + 1))
  fi
}
# expect_has LINE WORD...: completing LINE offers at least these words.
expect_has() {
  local line=$1 word
  shift
  COMP_LINE=$line
  COMP_POINT=${#line}
  read -ra COMP_WORDS <<<"$line"
  [[ $line == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _anneal 2>/dev/null
  for word in "$@"; do
    if ! printf '%s\n' "${COMPREPLY[@]}" | grep -qxF -- "$word"; then
      echo "FAIL: '$line<TAB>' does not offer '$word' (offers: ${COMPREPLY[*]})" >&2
      failures=$((failures + 1))
    fi
  done
}

expect_has "anneal " init data fsck gc train runs model eval predict
expect "anneal da" "data"
expect "anneal data " "check diff export import list show"
expect "anneal data im" "import"
expect "anneal --store subdir data im" "import"
expect "anneal --json ru" "runs"
expect "anneal --" "--help --json --key-file --log-format --store --version"
expect "anneal --key-file " "iris.csv notes.txt subdir"
expect "anneal rekey --new-key-file " "iris.csv notes.txt subdir"
expect_has "anneal data import --" --labels --test --split --no-header --json --store --help
expect "anneal data import --no" "--no-header --nonfinite"
expect "anneal data import iris " "iris.csv notes.txt subdir"
expect "anneal data import --labels " "iris.csv notes.txt subdir"
expect "anneal data import --split " ""
expect "anneal data import --split 0.2 iris i" "iris.csv"
expect "anneal --store " "subdir"
expect "anneal data export iris@v1 -o " "iris.csv notes.txt subdir"
expect "anneal train " "iris.csv notes.txt subdir"
expect "anneal data show " ""
expect "anneal init " ""
expect_has "anneal serve --" --model --bind --port --tokens --max-body-bytes --max-rows --request-timeout
expect "anneal serve --tokens " "iris.csv notes.txt subdir"
expect "anneal serve --port " ""

if [ "$failures" -ne 0 ]; then
  echo "$failures completion checks failed" >&2
  exit 1
fi
echo "all completion checks passed"
