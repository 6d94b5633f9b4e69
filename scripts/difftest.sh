#!/usr/bin/env bash
# The long run of the differential test of pcapsync query against
# libpcap (test/difftest, docs/query.md "Tested against libpcap"): many
# captures of every link type, every classic filter and many random
# ones on each, each query with and without the index and a window,
# compared packet by packet with tcpdump -r on the source file.
#
#   scripts/difftest.sh [--seed N] [--captures N] [--filters N] [--packets N]
#                       [--links L,...] [--classes C,...] [--modes M,...]
#                       [--jobs N] [--keep DIR]
#
# --seed: the run's seed (default: a random one, printed first; the same
#   seed and sizes give the same captures and filters)
# --captures: captures, cycling through the link types (default 36)
# --filters: random filters per capture, beside the classic ones (default 30)
# --packets: packets per capture, every other one three times as many (default 3000)
# --links, --classes, --modes: only these link types (capgen names),
#   filter classes, query modes (the test's names), to look into one
# --jobs: tcpdump and query processes at once (default 2)
# --keep DIR: keep the captures, the output root, every differing query's
#   output and diffs.tsv (one line per difference) under DIR/seed-N
#
# Prints the seed, then the run's figures (captures, filters, queries,
# differences) and the differences grouped; exits non-zero on any.
# Needs tcpdump (libpcap) in PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
seed="" captures=36 filters=30 packets=3000 links="" classes="" modes="" jobs=2 keep=""
while [ $# -gt 0 ]; do
	case "$1" in
	--seed) seed="$2" ;;
	--captures) captures="$2" ;;
	--filters) filters="$2" ;;
	--packets) packets="$2" ;;
	--links) links="$2" ;;
	--classes) classes="$2" ;;
	--modes) modes="$2" ;;
	--jobs) jobs="$2" ;;
	--keep) keep="$2" ;;
	-h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "difftest.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
	esac
	shift 2
done
if [ -z "$seed" ]; then
	seed=$(( (RANDOM << 15 | RANDOM) % 1000000 + 2 ))
fi
echo "difftest: seed $seed (again: scripts/difftest.sh --seed $seed --captures $captures --filters $filters --packets $packets)"
start=$(date +%s)
set +e
go test -count=1 -timeout 0 -run '^TestDifferential$' -v ./test/difftest -args \
	-difftest.seed="$seed" -difftest.captures="$captures" -difftest.filters="$filters" \
	-difftest.packets="$packets" -difftest.links="$links" -difftest.classes="$classes" \
	-difftest.modes="$modes" -difftest.jobs="$jobs" -difftest.keep="$keep"
rc=$?
set -e
echo "difftest: seed $seed, $(( $(date +%s) - start ))s, exit $rc"
exit $rc
