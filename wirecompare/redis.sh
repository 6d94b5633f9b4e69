#!/usr/bin/env bash
# The Redis pipeline benchmark (issue 7): raw, snappy, s2 and zstd on
# packet batches and JSON log payloads, through SET/XADD and GET/XREAD
# of a redis-server it starts on a free loopback port (and stops), with
# and without pipelining. Writes results/redis.md, a Markdown table for
# BENCHMARKS.md; progress goes to stderr.
#
#   wirecompare/redis.sh              # OPS=2000 ENTRIES=2000, about a minute on 2 cores
#   OPS=200 wirecompare/redis.sh      # a quick look
#
# Needs redis-server (Debian: redis-server; scripts/deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off
mkdir -p results
go run ./cmd/redisbench -ops "${OPS:-2000}" -entries "${ENTRIES:-2000}" >results/redis.md
cat results/redis.md
