#!/bin/bash
# The cost model of docs/SCALING.md (bench/mpi/model.py) against a measured
# step, where the network is the bottleneck: 2 ranks of
# bench/mpi/data_parallel.cc (the MLP and CNN of docs/examples, Adam, batch
# 128, CPU backend, 1 thread per rank) in two network namespaces joined by
# veth pairs and a bridge (as tests/e2e/mpi_netns_test.sh), Open MPI over
# TCP on the veths only, each namespace's veth limited by `tc qdisc ... netem
# rate R` (a token bucket, tbf, where the kernel has no netem) on its egress
# (so each "host" sends at R, full duplex), for R = unlimited, 1 Gbit/s and
# 200 Mbit/s (RATES; unlimited always, as the reference). This machine's veths move memory at
# memory speed, so 10 or 25 Gbit/s cannot be shown here; rates this low
# make the link dominate, which is the part of the model under test.
#
# Prints, per model and rate: the model's prediction (from one rank's
# measured seconds per sample and the rate) and the measurement (samples/s,
# efficiency against twice one rank, milliseconds per step in the
# communicator, and the bytes per step rank 1's veth sent, TCP/IP headers
# included, against the model's 2(N-1)/N x gradient bytes), and the link's
# own time for the all-reduce's bytes without MPI: two plain TCP exchanges
# of G/2 each way at once (bench/mpi/tcp_exchange.py).
# Skipped, saying why, without root (network namespaces), tc and a shaper,
# mpirun, the MPI plugin or the data.
set -euo pipefail
: "${ANNEAL:?}" "${BUILD:?}"
HERE=$(dirname "$(realpath "$0")")
FMNIST=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
PYTHON=${PYTHON:-/usr/bin/python3}
RATES=${RATES:-"1gbit 200mbit"}
ROUNDS=${ROUNDS:-3}
for rate in $RATES; do
  [[ $rate =~ ^([0-9]+[gm]bit)$ ]] || { echo "netem.sh: RATES: expected NUMBER gbit|mbit, got '$rate'" >&2; exit 2; }
done
driver="$BUILD/bench/anneal-data-parallel"
title="== data-parallel step over a rate-limited link (2 ranks in 2 network namespaces): model against measurement"
skip() {
  echo "$title: skipped ($*)"
  exit 0
}
[ -x "$driver" ] || skip "anneal was built without the MPI plugin: no $driver"
command -v mpirun > /dev/null || skip "no mpirun"
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $FMNIST (FMNIST_DIR)"
for tool in ip tc unshare; do
  command -v "$tool" > /dev/null || skip "no $tool (iproute2, util-linux)"
done

work=$(mktemp -d)
tag=$(($$ % 100000))
subnet="10.215.$(($$ % 250))"
bridge="anbb$tag"
ns1="anneal-bench-$tag-1"
ns2="anneal-bench-$tag-2"
. "$HERE/../../tests/e2e/two_hosts.sh"
cleanup() {
  two_hosts_down "anneal-bench-$tag" "$bridge"
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns1" 2> "$work/err" || skip "cannot create a network namespace (root or CAP_NET_ADMIN): $(cat "$work/err")"
two_hosts_up "anneal-bench-$tag" "$bridge" "$subnet" "ab$tag" 2> "$work/err" ||
  skip "cannot join network namespaces by veth pairs: $(cat "$work/err")"
# The shaper: netem's rate where the kernel has sch_netem; else a token
# bucket (tbf), which limits the rate as well but lets a full bucket out at
# line speed: its bucket is kept at 32 kB, under 4% of the smaller model's
# bytes per step. netem's queue holds 1000 packets by default and tbf's
# `latency` bounds its queue: at these rates a step's burst of gradients
# would overflow either, and the drops would time TCP's recovery rather
# than the link. (TBF_LATENCY sets tbf's queue: 5ms times the same here.)
shaper() {  # NS DEV RATE
  case $shaper in
    netem) ip netns exec "$1" tc qdisc add dev "$2" root netem rate "$3" limit 100000 ;;
    tbf) ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$3" burst 32kb latency "${TBF_LATENCY:-1s}" ;;
  esac
}
limit() {  # RATE: each namespace's egress at RATE, or unlimited
  for i in 1 2; do
    ip netns exec "anneal-bench-$tag-$i" tc qdisc del dev "ab${tag}p$i" root 2> /dev/null || true
    [ "$1" = unlimited ] || shaper "anneal-bench-$tag-$i" "ab${tag}p$i" "$1" || return 1
  done
}
shaper=netem
if ! limit 1gbit 2> "$work/err"; then
  shaper=tbf
  limit 1gbit 2>> "$work/err" || skip "neither tc netem nor tbf is available: $(tr '\n' ' ' < "$work/err")"
fi

plugin_dir=$(dirname "$ANNEAL")
one_rank() {  # MODEL STEPS -> samples/s
  ANNEAL_PLUGIN_DIR="$plugin_dir" mpirun -np 1 --allow-run-as-root --mca btl self \
    "$driver" "$1" "$2" "$FMNIST" | awk '{print $1}'
}
# One rank on each namespace, over their veths only (two_hosts.sh).
two_hosts() {  # MODEL STEPS -> "samples/s comm_share"
  two_hosts_mpirun "anneal-bench-$tag" "$subnet" "$work" -np 2 -x ANNEAL_PLUGIN_DIR="$plugin_dir" \
    "$driver" "$1" "$2" "$FMNIST"
}
# The link without MPI: both namespaces send BYTES to each other at once
# over TCP (bench/mpi/tcp_exchange.py), the median of 7, in milliseconds.
tcp_exchange() {  # BYTES -> ms
  local server
  ip netns exec "$ns1" "$PYTHON" "$HERE/tcp_exchange.py" serve "$subnet.1" "$1" &
  server=$!
  ip netns exec "$ns2" "$PYTHON" "$HERE/tcp_exchange.py" connect "$subnet.1" "$1"
  wait "$server"
}
tx_bytes() { ip netns exec "$ns2" cat "/sys/class/net/ab${tag}p2/statistics/tx_bytes"; }

echo "$title"
echo "(shaper: tc $shaper; best of $ROUNDS rounds each; the model, bench/mpi/model.py: t_comm = 2(N-1)/N x G x 8 / rate"
echo " + 2(N-1) x 30 us, t_compute = 64 rows x 1 rank's seconds per row; link = t_comm's rate term, measured as the"
echo " communicator's time per step over the unlimited veth's; tcp = the same bytes exchanged over plain TCP, as the"
echo " all-reduce's two halves do, without MPI)"
printf '%-4s %-9s %8s | %8s %8s | %5s %5s | %8s %8s | %8s %8s %8s | %8s %8s\n' model rate "1 rank/s" "pred 2/s" \
  "meas 2/s" "p.eff" "m.eff" "p.comm" "m.comm" "p.link" "m.link" "tcp" "p.bytes" "m.bytes"
best() {  # COMMAND... -> the output line whose first field (samples/s) is highest over $ROUNDS runs
  local r
  for ((r = 0; r < ROUNDS; r++)); do "$@"; done | sort -g -k1,1 | tail -n1
}
measure() {  # MODEL STEPS -> "samples/s comm_share bytes_sent_by_rank_1"
  local before out
  before=$(tx_bytes)
  out=$(two_hosts "$1" "$2")
  echo "$out $(($(tx_bytes) - before))"
}
for model in mlp cnn; do
  steps=100
  [ "$model" = cnn ] && steps=20
  one=$(best one_rank "$model" "$steps")
  half=$(("$("$PYTHON" "$HERE/model.py" bytes "$model")" / 2))
  results=""
  for rate in unlimited $RATES; do
    limit "$rate"
    results+="$rate $(best measure "$model" "$steps") $(tcp_exchange "$half")"$'\n'
  done
  limit unlimited
  # The driver runs 2 warm-up steps before the timed ones; rank 1's veth
  # counts them too, and Open MPI's start-up and barriers (a few kB).
  printf '%s' "$results" | "$PYTHON" "$HERE/model.py" check "$model" "$one" "$((steps + 2))"
done
