#!/bin/bash
# Bad configs fail with a one-line error naming where, before any training,
# and leave no run behind.
. "$E2E_LIB"

expect_rc 0 init
expect_rc 0 data import digits "$TEST_DATA/digits.csv"
cat >"$WORK/ok.ini" <<'INI'
name    = digits-mlp
dataset = digits
layers  = dense(32) relu dense(10)
epochs  = 1
threads = 1
INI

printf 'name = x\ndataset = digits\nlayers = dense(10)\nbatchsize = 4\n' >"$WORK/typo.ini"
expect_error 2 "typo.ini:4: unknown key 'batchsize'; did you mean 'batch'?" train "$WORK/typo.ini"
expect_error 2 "unknown key 'learning_rate'; did you mean 'lr'?" train "$WORK/ok.ini" --set learning_rate=0.1
expect_error 2 "did you mean 'relu'" train "$WORK/ok.ini" --set "layers=dense(32) rleu dense(10)"
expect_error 2 "10 classes" train "$WORK/ok.ini" --set "layers=dense(32) relu dense(7)"
expect_error 2 "conv" train "$WORK/ok.ini" --set "layers=conv(8,3) relu dense(10)"
expect_error 1 "no dataset named 'nope'" train "$WORK/ok.ini" --set dataset=nope
expect_error 1 "has no version v7" train "$WORK/ok.ini" --set dataset=digits@v7
expect_error 2 "label = 'price': dataset digits@v1 has no such column" train "$WORK/ok.ini" --set label=price
expect_error 2 "imported with label 'digit'" train "$WORK/ok.ini" --set label=pixel_0_1
expect_error 2 "lr = 'fast': expected a number" train "$WORK/ok.ini" --set lr=fast
expect_error 2 "did you mean 'adam'" train "$WORK/ok.ini" --set optimizer=adma
expect_error 2 "expected a step count" train "$WORK/ok.ini" --set checkpoint_every=soon
expect_error 2 "or set validation = FRACTION" train "$WORK/ok.ini" --set early_stop=val_loss:2
expect_error 2 "bce needs exactly 2" train "$WORK/ok.ini" --set loss=bce
expect_error 2 "missing key 'dataset'" train <(printf 'name = x\nlayers = linear\n')
expect_error 2 "expected key=value" train "$WORK/ok.ini" --set lr
expect_error 2 "cannot read" train "$WORK/none.ini"
expect_error 1 "no run run-4" train --resume run-4
expect_error 2 "expected a run id" train --resume latest
# Issue 29: a network larger than the machine is refused before it is
# allocated (it was killed by the kernel at 24 GB, no run recorded), naming
# the key and the limit (the machine's physical memory).
memory=$(( $(getconf _PHYS_PAGES) * $(getconf PAGE_SIZE) ))
expect_error 2 "--set layers: layers = dense(1e9) dense(10): layer 1 'dense(1e9)': training the network up to here needs at least" \
  train "$WORK/ok.ini" --set "layers=dense(1e9) dense(10)"
expect_contains "$ERR" "more than the limit of $memory bytes" "the limit is the machine's memory"
expect_error 2 "layer 2 'dense(1e9)'" train "$WORK/ok.ini" --set "layers=dense(1e3) dense(1e9) dense(10)"
# Issue 29: a bad model name is called a model name, under its key.
expect_error 2 "--set name: name = '模型': expected a model name" train "$WORK/ok.ini" --set name=模型
# A line that is no setting names its line. One holding Boost's own
# placeholders made Boost's message substitute itself forever (a hang the
# config fuzzer found), as did an argument such as --%canonical_option%.
printf 'name = x\ndataset = digits\n%%invalid_line%% %%option%%\n' >"$WORK/placeholder.ini"
expect_error 2 "placeholder.ini:3: '%invalid_line% %option%': expected key = value, a [section] or a # comment" \
  train "$WORK/placeholder.ini"
expect_error 2 "unrecognised option '--%canonical_option%'" train "$WORK/ok.ini" --%canonical_option%
expect_error 2 "the argument ('%value%') for option '--split' is invalid" \
  data import d "$TEST_DATA/digits.csv" --split %value%

expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "0" "bad configs leave no run behind"
expect_rc 0 --json train "$WORK/ok.ini"
expect_rc 0 --json runs list
expect_eq "$(json_get 'len(j["runs"])')" "1" "a good config records one run"
finish
