#!/usr/bin/env bash
# Runs every test of pcapsync, installing what the tests need first.
# As root, the capture and end-to-end tests run in network namespaces
# they create and delete themselves; without root they are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

scripts/deps.sh
go mod download

# quiet runs a command whose output is long (benchmark figures): shown
# only when it fails, so that CI says why.
quiet() {
	local out
	out=$(mktemp)
	if ! "$@" >"$out" 2>&1; then
		cat "$out"
		rm -f "$out"
		return 1
	fi
	rm -f "$out"
}

echo "== gofmt, goimports, go vet"
gofiles=$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')
bad=$(gofmt -l $gofiles)
if [ -n "$bad" ]; then echo "gofmt would change: $bad"; exit 1; fi
# goimports at the version wirecompare/ pins: imports grouped, standard library
# first; generated files stay as their generators wrote them.
handwritten=$(grep -L '^// Code generated .* DO NOT EDIT\.$' $gofiles)
bad=$(go run golang.org/x/tools/cmd/goimports@v0.22.0 -l $handwritten)
if [ -n "$bad" ]; then echo "goimports would change: $bad"; exit 1; fi
go vet ./...
# Capture is Linux-only; everything else, tests included, must still
# build elsewhere (the end-to-end tests are Linux's alone).
GOOS=darwin go build ./...
GOOS=darwin go vet ./...

echo "== unit and end-to-end tests (race detector on)"
if [ "$(id -u)" -eq 0 ]; then export PCAPSYNC_E2E_REQUIRE=1; fi
# A failing test's log can be long (a server's log dumped after the
# error): the lines that say what failed are repeated at the end, where
# a reader of the tail of CI's output finds them.
testlog=$(mktemp)
if ! go test -race -count=1 -timeout 25m ./... 2>&1 | tee "$testlog"; then
	echo "== what failed (the failures above, without the logs dumped with them)"
	grep -E -e '^\s*--- FAIL|^(FAIL|panic:|fatal error:)' -e '^\s+[A-Za-z0-9_]+\.go:[0-9]+: ' "$testlog" |
		grep -v -E 'level=(INFO|DEBUG)' | cut -c1-400 | tail -n 80
	rm -f "$testlog"
	exit 1
fi
rm -f "$testlog"

echo "== the lab build (-tags lab: pcapsync bench)"
go vet -tags lab ./cmd/pcapsync
GOOS=darwin go vet -tags lab ./cmd/pcapsync
go test -race -count=1 -tags lab ./cmd/pcapsync

echo "== the tracer, built in (-tags trace)"
go vet -tags trace ./internal/functrace
go test -race -count=1 -tags trace ./internal/functrace ./cmd/functrace
quiet go test -run='^$' -bench=. -benchtime=1x -tags trace ./internal/functrace

echo "== the format comparison (wirecompare/, its own module): generated code, tests, each benchmark once"
(cd wirecompare && ./check-generated.sh && go vet ./... && quiet go test -race -count=1 -run . -bench . -benchtime=1x ./...)

echo "== allocation tests (without the race detector, which makes sync.Pool drop items)"
go test -count=1 -run='Allocs' ./...

echo "== fuzzers, a fixed number of inputs each"
# fuzz NAME PACKAGE [DIVISOR]: FUZZ_COUNT inputs (default 20000), divided
# by DIVISOR for a fuzzer whose every input is costly.
fuzz() { go test -run='^$' -fuzz="^$1\$" -fuzztime="$((${FUZZ_COUNT:-20000} / ${3:-1}))x" "$2"; }
fuzz FuzzBatch ./internal/wire
fuzz FuzzFrames ./internal/wire
fuzz FuzzDatagram ./internal/wire
fuzz FuzzPiece ./internal/wire
# Each input starts a collector core with its store in a new directory
# (about 10 ms): an eighth of the inputs, about 30 s.
fuzz FuzzUDPDatagram ./internal/collector 8
fuzz FuzzScanPart ./internal/store
fuzz FuzzEncode ./internal/pcapzstd
fuzz FuzzEncode ./internal/pcapflate
fuzz FuzzRetainIndex ./internal/store
fuzz FuzzStateFile ./internal/store
fuzz FuzzParse ./internal/index
fuzz FuzzSummary ./internal/index
fuzz FuzzBins ./internal/index
fuzz FuzzParseISBs ./internal/timeline
fuzz FuzzReader ./internal/pcapfile
fuzz FuzzDecompress ./internal/compress
fuzz FuzzRoundTrip ./internal/compress
fuzz FuzzParseRequest ./internal/tap
fuzz FuzzPacketCounter ./internal/tap
fuzz FuzzDecodeEntry ./internal/redisfeed
fuzz FuzzRecord ./internal/kafkarec
fuzz FuzzProgram ./internal/filter
fuzz FuzzAppendLine ./internal/pktline
fuzz FuzzDecode ./internal/flow
fuzz FuzzParse ./internal/flow
fuzz FuzzTable ./internal/flow

echo "== benchmarks, once each so they keep working"
quiet go test -run='^$' -bench=. -benchtime=1x ./...
echo "all tests passed"
