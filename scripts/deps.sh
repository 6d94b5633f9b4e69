#!/usr/bin/env bash
# Installs what building and testing pcapsync needs on Debian/Ubuntu:
# libpcap (filters are compiled by libpcap), gcc (cgo), iproute2 (network
# namespaces for capture tests), tshark/capinfos (output checks),
# nftables (the UDP loss test's router drops and counts in a namespace),
# tcpdump, netcat and rsync (the side-by-side benchmarks), curl (the remote
# query test fetches with a client certificate), protoc (the
# format comparison's generated code in wirecompare/, checked for drift),
# redis-server (the Redis feed's tests and benchmark start their own, on a
# free loopback port; the package's system service is left alone), systemd
# (systemd-analyze checks the units), strace (the system calls a live run
# makes, against the units' filters) and rpm (rpm -qpl lists the .rpm
# scripts/package.sh builds), zstd (zstd -t and zstdcat check the zstd
# files of a frame per block, which Wireshark 4.0 reads only in part), a Java
# runtime and Maven (the Kafka broker the Kafka tests start, fetched from
# Maven Central by scripts/kafka.sh into a cache), prometheus (its promtool
# checks and unit-tests the alert rules of deploy/prometheus; the server is
# not started by the tests), python3-venv and, in a venv under
# ~/.cache/pcapsync/venv, the communityid package from PyPI (the Community
# ID reference internal/flow's tests compare with), chromium (the
# console's browser tests drive it headless with chromedp). Installs only
# what is missing.
set -euo pipefail
pkgs=(libpcap-dev gcc iproute2 nftables tshark tcpdump netcat-openbsd rsync protobuf-compiler redis-server prometheus systemd strace rpm curl zstd python3-venv chromium)
missing=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
# communityid: the Community ID reference, pinned, in a venv of the
# system's python3 (PCAPSYNC_COMMUNITYID_PYTHON overrides where the tests
# look for it).
communityid() {
	local venv="${XDG_CACHE_HOME:-$HOME/.cache}/pcapsync/venv"
	"$venv/bin/python3" -c 'import communityid' 2>/dev/null && return 0
	/usr/bin/python3 -m venv "$venv"
	"$venv/bin/pip" install -q communityid==1.5.0
}
if [ ${#missing[@]} -eq 0 ]; then
	"$(dirname "$0")/kafka.sh" >/dev/null
	communityid
	exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# tshark asks whether non-root users may capture; answer no, quietly.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
"$(dirname "$0")/kafka.sh" >/dev/null
communityid
