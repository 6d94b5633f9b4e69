#!/usr/bin/env bash
# What compression costs and saves, end to end on loopback: replays N
# packets (default 200 000 IMIX) of three kinds of traffic through
# agent -> collector and reports, per setting, the median over ROUNDS
# (default 3) of the wall time, the agent's and the collector's CPU
# seconds, and the bytes on disk or on the wire, with the ratio against
# no compression measured in the same run.
#   traffic: random  (generated pseudo-random payloads: the worst case)
#            text    (HTTP headers and JSON log lines)
#            headers (the random traffic cut to 128 bytes, like -s 128)
#   files:   collector --file-compress none|gzip:1|gzip|zstd:1|zstd
#   wire:    agent --compress none|lz4|s2|zstd|auto
# Usage: scripts/bench-compress.sh [N] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200000}; rounds=${2:-3}
command -v editcap >/dev/null || scripts/deps.sh
go build -buildvcs=auto -o bin/pcapsync ./cmd/pcapsync
bin=$PWD/bin/pcapsync
work=$(mktemp -d /tmp/pcapsync-compress.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin" gen file --out "$work/random.pcap" --count "$n" --mix imix >/dev/null
"$bin" gen file --out "$work/text.pcap" --count "$n" --mix imix --text >/dev/null
editcap -s 128 "$work/random.pcap" "$work/headers.pcap"
cat "$work"/*.pcap >/dev/null # into the page cache
port=$((20000 + RANDOM % 10000))

# run TRAFFIC COLLECTOR-FLAGS AGENT-FLAGS: prints wall, agent CPU,
# collector CPU, bytes on disk, records bytes sent (after compression).
run() {
	rm -rf "$work/out"
	/usr/bin/time -f '%U %S' -o "$work/coll.time" "$bin" collector --insecure --listen "127.0.0.1:$port" \
		--dir "$work/out" --log-level error $2 >/dev/null &
	local coll=$!
	for _ in $(seq 50); do nc -z 127.0.0.1 "$port" 2>/dev/null && break; sleep 0.02; done
	local start end
	start=$(date +%s.%N)
	/usr/bin/time -f '%U %S' -o "$work/agent.time" "$bin" agent --insecure --collector "127.0.0.1:$port" \
		--name c --read "$work/$1.pcap" --log-level error $3 >"$work/agent.out"
	end=$(date +%s.%N)
	pkill -TERM -P "$coll" # the collector, child of GNU time
	wait "$coll" || true
	grep -q "acknowledged $n," "$work/agent.out" || { echo "not every packet acknowledged:" >&2; cat "$work/agent.out" >&2; exit 1; }
	local ratio
	ratio=$(sed -n 's/.*compressed \([0-9]*\) to \([0-9]*\) bytes.*/\2 \1/p' "$work/agent.out" | awk '{printf "%.4f", $1/$2}')
	echo "$(echo "$end - $start" | bc) $(awk '{print $1+$2}' "$work/agent.time") $(awk '{print $1+$2}' "$work/coll.time") $(du -sb "$work/out/c" | cut -f1) ${ratio:-1}"
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# table KIND TRAFFIC SETTINGS...: KIND is files or wire.
table() {
	local kind=$1 traffic=$2; shift 2
	echo
	echo "### $kind, $traffic traffic ($n IMIX packets, median of $rounds)"
	echo
	if [ "$kind" = files ]; then
		echo "| --file-compress | seconds | agent CPU s | collector CPU s | bytes on disk | disk vs none |"
	else
		echo "| --compress | seconds | agent CPU s | collector CPU s | bytes on disk | records on the wire vs raw |"
	fi
	echo "|---|---|---|---|---|---|"
	: >"$work/res"
	for r in $(seq "$rounds"); do
		for s in "$@"; do
			if [ "$kind" = files ]; then res=$(run "$traffic" "--file-compress $s" ""); else res=$(run "$traffic" "" "--compress $s"); fi
			echo "$s $res" >>"$work/res"
		done
	done
	local base=""
	for s in "$@"; do
		col() { grep "^$s " "$work/res" | cut -d' ' -f"$1" | median; }
		local secs a c disk ratio
		secs=$(col 2); a=$(col 3); c=$(col 4); disk=$(col 5); ratio=$(col 6)
		[ -z "$base" ] && base=$disk
		[ "$kind" = files ] && ratio=$(echo "$disk / $base" | bc -l)
		printf '| %s | %.3f | %.2f | %.2f | %s | %.3f |\n' "$s" "$secs" "$a" "$c" "$disk" "$ratio"
	done
}

echo "pcapsync compression, $(date -u +%Y-%m-%d), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), Linux $(uname -r), $(go version | cut -d' ' -f3)"
for t in random text headers; do
	table files "$t" none gzip:1 gzip zstd:1 zstd
done
for t in random text headers; do
	table wire "$t" none lz4 s2 zstd auto
done
echo
echo "seconds: agent start to exit (every packet acknowledged). CPU: user + system (GNU time). Wire ratio: the agent's records bytes after / before compression (its summary line)."
