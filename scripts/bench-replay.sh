#!/usr/bin/env bash
# Replays a generated file of N packets (default 1 M, IMIX: 64/576/1500
# bytes at 7:4:1) through agent -> collector -> pcapng on loopback and,
# alternating in the same run, through PCAP-over-IP (tcpdump -r F -w - |
# nc into nc -l > file). ROUNDS rounds each; prints every round and the
# median of each column, and the ratio of the medians.
# Usage: scripts/bench-replay.sh [N] [MIX] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}; mix=${2:-imix}; rounds=${3:-5}
scripts/deps.sh
go build -o bin/pcapsync ./cmd/pcapsync
bin=$PWD/bin/pcapsync
work=$(mktemp -d /tmp/pcapsync-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin" gen file --out "$work/in.pcap" --count "$n" --mix "$mix" >/dev/null
cat "$work/in.pcap" >/dev/null # into the page cache
port=$((20000 + RANDOM % 10000))
TIMEFORMAT='%R %U %S'
# cpu PID: user+system seconds of a running process (clock ticks at 100 Hz).
cpu() { awk '{printf "%.2f", ($14+$15)/100}' "/proc/$1/stat"; }

run_pcapsync() {
	rm -rf "$work/out"
	"$bin" collector --insecure --listen "127.0.0.1:$port" --dir "$work/out" --log-level error >/dev/null &
	local coll=$!
	sleep 0.3
	local t
	t=$( { time "$bin" agent --insecure --collector "127.0.0.1:$port" --name bench --read "$work/in.pcap" --log-level error >"$work/agent.out"; } 2>&1 )
	local ccpu; ccpu=$(cpu "$coll")
	kill -TERM "$coll"; wait "$coll" || true
	grep -q "acknowledged $n," "$work/agent.out" || { echo "pcapsync: not every packet acknowledged:" >&2; cat "$work/agent.out" >&2; exit 1; }
	local bytes; bytes=$(du -sb "$work/out" | cut -f1)
	set -- $t
	echo "pcapsync $1 $(echo "$2 + $3" | bc) $ccpu $bytes"
}

run_poip() {
	rm -f "$work/poip.pcap"
	{ time nc -l 127.0.0.1 "$port" >"$work/poip.pcap"; } 2>"$work/recv.time" &
	local recv=$!
	sleep 0.2
	local start; start=$(date +%s.%N)
	local t
	t=$( { time sh -c "tcpdump -r '$work/in.pcap' -w - 2>/dev/null | nc -N 127.0.0.1 $port"; } 2>&1 )
	wait "$recv" || true
	local end; end=$(date +%s.%N)
	local bytes; bytes=$(stat -c %s "$work/poip.pcap")
	set -- $t $(cat "$work/recv.time")
	# wall time until the receiver has written everything and exited
	echo "poip $(echo "$end - $start" | bc) $(echo "$2 + $3" | bc) $(echo "$5 + $6" | bc) $bytes"
}

printf '%-9s %5s %8s %11s %13s %13s %14s\n' method round seconds packets/s sender-cpu-s receiver-cpu-s bytes-written
: >"$work/results"
for r in $(seq "$rounds"); do
	for m in run_pcapsync run_poip; do
		set -- $($m)
		pps=$(echo "$n / $2" | bc -l)
		printf '%-9s %5s %8.3f %11.0f %13s %13s %14s\n' "$1" "$r" "$2" "$pps" "$3" "$4" "$5"
		echo "$1 $2 $pps $3 $4 $5" >>"$work/results"
	done
done
median() { grep "^$1 " "$work/results" | cut -d' ' -f"$2" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo
printf '%-9s %8s %11s %13s %13s %14s %12s\n' median seconds packets/s sender-cpu-s receiver-cpu-s bytes-written cpu-us/pkt
for m in pcapsync poip; do
	s=$(median $m 2); p=$(median $m 3); a=$(median $m 4); c=$(median $m 5); b=$(median $m 6)
	printf '%-9s %8.3f %11.0f %13s %13s %14s %12.2f\n' "$m" "$s" "$p" "$a" "$c" "$b" "$(echo "($a + $c) * 1000000 / $n" | bc -l)"
done
printf 'ratio pcapsync/poip packets/s: %.2f (%d packets, mix %s, %d rounds)\n' \
	"$(echo "$(median pcapsync 3) / $(median poip 3)" | bc -l)" "$n" "$mix" "$rounds"
echo "sender = agent, or tcpdump -r | nc; receiver = collector, or nc -l > file"
