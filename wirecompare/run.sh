#!/usr/bin/env bash
# The one command that regenerates the format comparison: runs every
# benchmark of this module COUNT times (separate passes, so that slow
# drift on a shared machine spreads over all codecs alike), writes the
# raw output and benchstat's table to results/, and REPORT.md and
# chart.svg from them.
#
#   wirecompare/run.sh                          # COUNT=6 BENCHTIME=300ms, ~15 min on 2 cores
#   COUNT=3 BENCHTIME=100ms wirecompare/run.sh  # a quick look
#   NOTE="Preliminary: ..." wirecompare/run.sh  # a line under the report's title
#
# Run it on a quiet machine: the figures are only as good as that.
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off
count=${COUNT:-6}
benchtime=${BENCHTIME:-300ms}
bench=${BENCH:-.}
mkdir -p results
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/wirecompare.test" .
# Where and when, as benchfmt configuration lines that cmd/report reads,
# so that the report can be regenerated from results/raw.txt alone.
{
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "kernel: $(uname -sr)"
	echo "nproc: $(nproc)"
	echo "memory: $(awk '/^MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "go: $(go env GOVERSION)"
	echo "count: $count"
	echo "benchtime: $benchtime"
} >results/raw.txt
for i in $(seq "$count"); do
	echo "== pass $i of $count" >&2
	(cd "$bin" && ./wirecompare.test -test.run='^$' -test.bench="$bench" -test.benchmem \
		-test.benchtime="$benchtime" -test.count=1 -test.timeout=60m) >>results/raw.txt
done
go tool benchstat results/raw.txt >results/benchstat.txt
go run ./cmd/report -raw results/raw.txt -out REPORT.md -chart chart.svg -note "${NOTE:-}"
echo "wrote wirecompare/REPORT.md, wirecompare/chart.svg, wirecompare/results/" >&2
