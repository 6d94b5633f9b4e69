#!/usr/bin/env bash
# Soaks the crash matrix (TestCrashMatrix, test/e2e/crashmatrix_test.go):
# round after round, each with a new seed and every cell (the 9 live
# spool cells, which kill the agent too, first, then the 144 replay
# cells), until DURATION (such as 30m, 2h, 1h30m; default 30m) has
# passed; the cells of the last round that would start after it are
# skipped. Prints each round's seed and failed cells, then one line:
# rounds, cells passed and failed, and the seeds that failed. Exits
# non-zero on any failure.
#
#   scripts/soak.sh [DURATION]
#
# Runs as root (the nearly full cells mount a tmpfs, the live cells
# create network namespaces). The binaries are built without the race
# detector, so a round moves several times the data of a race build in
# the same time; SOAK_RACE=1 builds with it.
# A failed seed reproduces with
#   PCAPSYNC_CRASH_SEED=N PCAPSYNC_CRASH_CELLS=all go test -run TestCrashMatrix ./test/e2e
# Logs go to $SOAK_LOGS (default a new directory under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
duration="${1:-30m}"
if [ "$(id -u)" -ne 0 ]; then
	echo "soak.sh: run as root (the matrix mounts tmpfs file systems and creates network namespaces)" >&2
	exit 2
fi
scripts/deps.sh
# DURATION: hours, minutes and seconds, as in 2h, 30m, 1h30m, 90s.
secs=0 rest="$duration"
while [[ "$rest" =~ ^([0-9]+)([hms])(.*)$ ]]; do
	n=${BASH_REMATCH[1]} rest=${BASH_REMATCH[3]}
	case ${BASH_REMATCH[2]} in h) n=$((n * 3600)) ;; m) n=$((n * 60)) ;; esac
	secs=$((secs + n))
done
if [ -n "$rest" ] || [ "$secs" -le 0 ]; then
	echo "soak.sh: bad duration \"$duration\" (want e.g. 30m, 2h, 1h30m, 90s)" >&2
	exit 2
fi
logs="${SOAK_LOGS:-$(mktemp -d /tmp/pcapsync-soak-XXXXXX)}"
mkdir -p "$logs"
race=()
[ "${SOAK_RACE:-0}" = 1 ] && race=(-race)
export PCAPSYNC_E2E_REQUIRE=1 PCAPSYNC_CRASH_CELLS=all
deadline=$(($(date +%s) + secs))
export PCAPSYNC_CRASH_DEADLINE=$deadline
echo "soak: $duration (until $(date -d "@$deadline" '+%F %T')), logs in $logs"

rounds=0 passed=0 failed=0 failedSeeds=()
while [ "$(date +%s)" -lt "$deadline" ]; do
	rounds=$((rounds + 1))
	seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
	log="$logs/round-$rounds-seed-$seed.log"
	echo "round $rounds: seed $seed"
	rc=0
	# A round that outlives the deadline is cut by go test's timeout:
	# the longest cell (3m) plus margin.
	PCAPSYNC_CRASH_SEED=$seed go test "${race[@]}" -count=1 -v -timeout "$((secs + 900))s" \
		-run '^TestCrashMatrix$' ./test/e2e >"$log" 2>&1 || rc=$?
	p=$(grep -c -- '--- PASS: TestCrashMatrix/' "$log" || true)
	f=$(grep -c -- '--- FAIL: TestCrashMatrix/' "$log" || true)
	passed=$((passed + p)) failed=$((failed + f))
	if [ "$rc" -ne 0 ]; then
		failedSeeds+=("$seed")
		grep -- '--- FAIL: TestCrashMatrix/' "$log" | sed 's/^ */  /' || true
		[ "$f" -eq 0 ] && echo "  go test failed outside the cells (exit $rc): see $log"
	fi
	echo "round $rounds: $p cells passed, $f failed"
done
echo "soak: $rounds rounds, $passed cells passed, $failed failed; failed seeds: ${failedSeeds[*]:-none}"
[ ${#failedSeeds[@]} -eq 0 ]
