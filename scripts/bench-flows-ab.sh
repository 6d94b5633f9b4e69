#!/bin/bash
# Issue 27 (BENCHMARKS.md, "Round by round, and within each run"): two
# collectors, flows on and off, side by side at the same time, so that the
# machine's swings in speed hit both: both collectors on CPU 1, each taking
# REPLAYS replays of INPUT from its own agents on CPU 0, ROUNDS rounds; prints
# each collector's CPU (user+sys, user, sys) per round.
# usage: scripts/bench-flows-ab.sh PCAPSYNC INPUT REPLAYS ROUNDS [DIR]
B=$1; IN=$2; N=$3; R=$4; D=${5:-/tmp}
for r in $(seq $R); do
  rm -rf $D/sim-on $D/sim-off; mkdir -p $D/sim-on $D/sim-off
  taskset -c 1 /usr/bin/time -f "%U %S" -o /tmp/sim-on.t $B collector --insecure --listen 127.0.0.1:7801 --dir $D/sim-on --log-level error --flows=true >/dev/null 2>&1 &
  p1=$!
  taskset -c 1 /usr/bin/time -f "%U %S" -o /tmp/sim-off.t $B collector --insecure --listen 127.0.0.1:7802 --dir $D/sim-off --log-level error --flows=false >/dev/null 2>&1 &
  p2=$!
  for port in 7801 7802; do while ! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do sleep 0.005; done; done
  (for i in $(seq $N); do taskset -c 0 $B agent --insecure --collector 127.0.0.1:7801 --name bench --read $IN --log-level error >/dev/null 2>&1; done) &
  a1=$!
  (for i in $(seq $N); do taskset -c 0 $B agent --insecure --collector 127.0.0.1:7802 --name bench --read $IN --log-level error >/dev/null 2>&1; done) &
  a2=$!
  wait $a1 $a2
  pkill -INT -f "listen 127.0.0.1:780[12]"; wait $p1 $p2
  echo "round $r on $(awk '{print $1+$2, $1, $2}' /tmp/sim-on.t) off $(awk '{print $1+$2, $1, $2}' /tmp/sim-off.t)"
done
