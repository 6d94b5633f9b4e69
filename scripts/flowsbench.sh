#!/bin/sh
# flowsbench.sh ROOT [PCAPSYNC] [ROUNDS]: issue 27's flows benchmark.
# Times `pcapsync flows --top 10 --by bytes` over the output root ROOT
# (e.g. the one `pcapsync bench query --keep DIR` leaves in DIR/root),
# ROUNDS times (default 3, after one unmeasured run), with its peak RSS
# (/usr/bin/time -v), against `tshark -q -z conv,ip` run over every data
# file of ROOT in turn, its times summed (one round). Prints the medians,
# the ratio and the load average. Needs tshark and GNU time.
set -eu
root=$1
exe=${2:-pcapsync}
rounds=${3:-3}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
now() { date +%s.%N; }
"$exe" flows --dir "$root" --top 10 --by bytes >/dev/null # warm
: >"$t/flows"
for _ in $(seq "$rounds"); do
	s=$(now)
	/usr/bin/time -v -o "$t/time" "$exe" flows --dir "$root" --top 10 --by bytes >"$t/out"
	e=$(now)
	rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$t/time")
	echo "$s $e $rss" | awk '{printf "%.3f %d\n", $2-$1, $3}' >>"$t/flows"
done
cat "$t/out"
flows=$(sort -n "$t/flows" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
rss=$(sort -k2 -n "$t/flows" | tail -1 | awk '{printf "%.0f", $2/1024}')
files=$(find "$root" -type f \( -name '*.pcapng' -o -name '*.pcapng.zst' -o -name '*.pcapng.gz' -o -name '*.pcap' \) | sort)
s=$(now)
for f in $files; do
	tshark -n -q -z conv,ip -r "$f" >/dev/null 2>&1
done
e=$(now)
tshark=$(echo "$s $e" | awk '{printf "%.3f", $2-$1}')
echo "files: $(echo "$files" | wc -l), $(du -sh "$root" | cut -f1)"
echo "pcapsync flows --top 10 --by bytes: median $flows s of $rounds, peak RSS $rss MiB (largest)"
echo "tshark -q -z conv,ip over every file: $tshark s"
echo "ratio: $(echo "$tshark $flows" | awk '{printf "%.0f", $1/$2}')x"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
