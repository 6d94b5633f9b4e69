#!/bin/bash
# Issue 30 on a multi-core machine (BENCHMARKS.md, "Issue 30 on a 16-core machine"):
# the pipeline (plain vs zstd files, the copy floor) at 1, 2, 4, 8 cores, eight
# agents into one collector, and exports of their root against cat at 1-16 cores.
# usage: scripts/bench-cores.sh OUTDIR [PACKETS], with a static lab build in
# .devrun/pcapsync (CGO_ENABLED=0 go build -tags lab -o .devrun/pcapsync ./cmd/pcapsync);
# needs only bash, taskset and awk; writes in /dev/shm/w.
set -u
O=$1; P=${2:-1000000}; B=$(readlink -f .devrun/pcapsync); W=/dev/shm/w
rm -rf $W; mkdir -p $W $O
NC=$(nproc)
{ echo "# $(date -u +%FT%TZ)"; nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|MHz" ; free -g | head -2; uname -r; $B --version; } > $O/machine.txt 2>&1
cpu() { awk '{print ($14+$15)/100}' /proc/$1/stat; }  # utime+stime seconds of a live process
cores() { echo "0-$(( $1 - 1 ))"; }
# 1. bench pipeline (one agent): plain vs zstd files and the copy floor, at 1,2,4,8 cores
for n in 1 2 4 8; do
  [ $n -le $NC ] || continue
  echo "## pipeline cores $n $(date -u +%T)" >> $O/pipeline.txt
  timeout 150 taskset -c $(cores $n) $B bench pipeline --packets $P --mix imix --rounds 3 --vs-collector-args '--file-compress zstd' --keep $W/bp >> $O/pipeline.txt 2>> $O/pipeline-rounds.txt
  rm -rf $W/bp/pcapsync-out $W/bp/floor*
done
# 2. eight agents into one collector, all cores: plain and zstd, alternating, 2 rounds
$B gen file --out $W/in.pcap --count $P --mix imix >/dev/null 2>&1
fan() { # $1 label $2.. collector args; prints label wall packets/s collector-cpu
  local lab=$1; shift
  rm -rf $W/root; mkdir -p $W/root
  $B collector --insecure --listen 127.0.0.1:7755 --dir $W/root --log-level error "$@" >/dev/null 2>&1 &
  local c=$!
  for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/7755) 2>/dev/null && break; sleep 0.05; done
  local t0=$(date +%s.%N) pids=()
  for a in 1 2 3 4 5 6 7 8; do $B agent --insecure --collector 127.0.0.1:7755 --name host0$a --read $W/in.pcap --log-level error >/dev/null 2>&1 & pids+=($!); done
  wait "${pids[@]}"
  local t1=$(date +%s.%N); local cc=$(cpu $c)
  kill -INT $c; wait $c
  awk -v l=$lab -v a=$t0 -v b=$t1 -v p=$P -v c=$cc -v by=$(du -sb $W/root | cut -f1) 'BEGIN {printf "%s wall %.3f pps %.0f collector_cpu_s %s bytes %s\n", l, b-a, 8*p/(b-a), c, by}'
}
for r in 1 2; do fan zstd --file-compress zstd >> $O/fanin.txt; fan plain >> $O/fanin.txt; done
# 3. export of the 8-agent root (plain, from the last fan-in): query --threads N on N cores vs cat, 3 rounds
FILES=$(ls $W/root/*/*.pcapng | sort)
echo "# root: $(echo $FILES | wc -w) files, $(du -sb $W/root | cut -f1) bytes" >> $O/export.txt
cat $FILES > /dev/null
for r in 1 2 3; do
  for n in 1 2 4 8 16; do
    [ $n -le $NC ] || continue
    rm -f $W/out; t0=$(date +%s.%N); taskset -c $(cores $n) $B query --dir $W/root --threads $n -w $W/out 2>/dev/null; t1=$(date +%s.%N)
    awk -v n=$n -v r=$r -v a=$t0 -v b=$t1 -v by=$(stat -c %s $W/out) 'BEGIN {printf "query cores %d round %d wall %.3f bytes %s\n", n, r, b-a, by}' >> $O/export.txt
    rm -f $W/out; t0=$(date +%s.%N); taskset -c $(cores $n) bash -c "cat $(echo $FILES) > $W/out"; t1=$(date +%s.%N)
    awk -v n=$n -v r=$r -v a=$t0 -v b=$t1 'BEGIN {printf "cat cores %d round %d wall %.3f\n", n, r, b-a}' >> $O/export.txt
  done
done
rm -rf $W
echo "# done $(date -u +%FT%TZ)" >> $O/machine.txt
