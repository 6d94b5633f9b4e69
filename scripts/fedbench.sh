#!/bin/bash
# fedbench.sh ROOT [PCAPSYNC] [ROUNDS] [SERVERS]: issue 28's benchmark.
# Spreads the agents of the output root ROOT (e.g. the one `pcapsync
# bench query --keep DIR` leaves in DIR/root) round-robin over SERVERS
# roots (default 3; hard links, ROOT is not changed), starts a collector
# serving each on a loopback query listener (--query-listen, plain
# HTTP), and times, alternating, ROUNDS times (default 3) each:
#   local:     pcapsync query --dir ROOT -w OUT
#   federated: pcapsync query --from A,B,C -w OUT
# for the whole range and for a needle (FILTER, default "udp port 53"),
# with their peak RSS (GNU time), and checks that both wrote the same
# packets (capinfos -c). Then the federated query's peak RSS with 10
# servers, each serving all of TENROOT (default ROOT; every agent ten
# times over).
# Prints medians, ratios and the load average.
set -euo pipefail
root=$(cd "$1" && pwd)
exe=$(command -v "${2:-pcapsync}")
rounds=${3:-3}
servers=${4:-3}
needle=${FILTER:-udp port 53}
t=$(mktemp -d /tmp/fedbench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$t"
}
trap cleanup EXIT
now() { date +%s.%N; }

# serve N NAME AGENTS...: a root of hard links to AGENTS' files (their
# retention index copied) and a collector serving it; prints its
# query listener's address.
port=17900
serve() {
	local name=$1
	shift
	local dir=$t/$name
	mkdir -p "$dir/.pcapsync-retain"
	for a in "$@"; do
		cp -al "$root/$a" "$dir/$a"
		if [ -f "$root/.pcapsync-retain/$a.json" ]; then
			cp "$root/.pcapsync-retain/$a.json" "$dir/.pcapsync-retain/"
		fi
	done
	port=$((port + 2))
	"$exe" collector --insecure --listen "127.0.0.1:$port" --query-listen "127.0.0.1:$((port + 1))" \
		--dir "$dir" --metrics "" --log-level error >"$t/$name.log" 2>&1 &
	pids+=($!)
	servers_list="${servers_list:+$servers_list,}127.0.0.1:$((port + 1))"
}

# ready ADDRS: waits until every query listener answers.
ready() {
	for a in ${1//,/ }; do
		for _ in $(seq 200); do
			if curl -s -o /dev/null -m 1 "http://$a/"; then break; fi
			sleep 0.05
		done
	done
}

# timed NAME ARGS...: runs pcapsync ARGS, appending "wall rss_kib" to $t/NAME.
timed() {
	local name=$1
	shift
	local s e
	s=$(now)
	/usr/bin/time -v -o "$t/time" "$exe" "$@" 2>"$t/$name.err" || {
		cat "$t/$name.err" >&2
		exit 1
	}
	e=$(now)
	echo "$s $e $(awk -F': ' '/Maximum resident/ {print $2}' "$t/time")" |
		awk '{printf "%.3f %d\n", $2-$1, $3}' >>"$t/$name"
}

median() { sort -n "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
maxrss() { sort -k2 -n "$1" | tail -1 | awk '{printf "%.0f", $2/1024}'; }

mapfile -t agents < <(cd "$root" && find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n' | sort)
servers_list=
for i in $(seq 0 $((servers - 1))); do
	mine=()
	for j in "${!agents[@]}"; do
		if [ $((j % servers)) -eq "$i" ]; then mine+=("${agents[$j]}"); fi
	done
	serve "s$i" "${mine[@]}"
done
fed=$servers_list
ready "$fed"

for r in $(seq "$rounds"); do
	for kind in whole needle; do
		filter=()
		if [ "$kind" = needle ]; then filter=(--filter "$needle"); fi
		order=(local fed)
		if [ $((r % 2)) -eq 0 ]; then order=(fed local); fi
		for m in "${order[@]}"; do
			if [ "$m" = local ]; then
				timed "local-$kind" query --dir "$root" -w "$t/out-$m" "${filter[@]}"
			else
				timed "fed-$kind" query --insecure --from "$fed" -w "$t/out-$m" "${filter[@]}"
			fi
		done
		a=$(capinfos -c -M "$t/out-local" | awk -F': *' '/Number of packets/ {print $2}')
		b=$(capinfos -c -M "$t/out-fed" | awk -F': *' '/Number of packets/ {print $2}')
		if [ "$a" != "$b" ]; then
			echo "fedbench: $kind: local wrote $a packets, federated $b" >&2
			exit 1
		fi
		echo "$a" >"$t/packets-$kind"
		rm -f "$t/out-local" "$t/out-fed"
	done
done

echo "root: $root, $(du -sh "$root" | cut -f1), ${#agents[@]} agents over $servers servers"
for kind in whole needle; do
	l=$(median "$t/local-$kind")
	f=$(median "$t/fed-$kind")
	echo "$kind ($(cat "$t/packets-$kind") packets): local median $l s (peak RSS $(maxrss "$t/local-$kind") MiB), federated median $f s (peak RSS $(maxrss "$t/fed-$kind") MiB), throughput federated/local $(echo "$l $f" | awk '{printf "%.2f", $1/$2}')x"
done

# Ten servers, each serving every agent of ROOT.
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
servers_list=
if [ -n "${TENROOT:-}" ]; then
	root=$(cd "$TENROOT" && pwd)
	mapfile -t agents < <(cd "$root" && find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n' | sort)
fi
for i in $(seq 0 9); do serve "ten$i" "${agents[@]}"; done
ready "$servers_list"
timed fed10 query --insecure --from "$servers_list" -w /dev/null
echo "10 servers, every agent of $root on each ($(tail -1 "$t/fed10.err" | cut -c1-120)): wall $(median "$t/fed10") s, peak RSS $(maxrss "$t/fed10") MiB"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
