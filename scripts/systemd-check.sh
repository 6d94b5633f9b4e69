#!/usr/bin/env bash
# Boots the pcapsync .deb under a real systemd: a Debian root made by
# debootstrap, started with "systemd-nspawn -b", the package installed
# with dpkg, the collector and the agent started by systemctl from the
# example settings the package installs (deploy/*.conf: mutual TLS with
# certificates from "pcapsync gen certs", docs/deploy.md), and checks
# what the tests without systemd cannot (docs/systemd.md, "Checked on a
# booted system"):
#
#   - the package: installed, the pcapsync user and group, every unit's
#     preset disabled and none enabled;
#   - the units' processes: user pcapsync, the capabilities the units
#     grant (/proc/PID/status: the agent CapEff and CapBnd net_admin and
#     net_raw alone, the collector none);
#   - a capture: the agent captures lo (the container's own network
#     namespace), traffic made inside reaches the collector's files;
#   - a restart of both keeps what was written, and the agent's clean
#     restart resends nothing;
#   - the journal: info lines at priority 6, a warning the check
#     provokes (a handshake the collector rejects) at 4, shown by
#     "journalctl -p warning", the rejected agent's fatal error at 3;
#   - a ReadWritePaths= drop-in naming a missing directory: the unit
#     fails once (226/NAMESPACE; with "-", the collector's exit status 2
#     and its message) and is not restarted every 5 s.
#
# It prints PASS or FAIL per check and exits 1 if any failed. Run it by
# hand before a release, as root, on a Linux host with systemd-nspawn
# (systemd-container), debootstrap and a Debian mirror; not in CI.
#
#   scripts/systemd-check.sh [DEB]
#
# DEB: the package to check; by default scripts/package.sh builds one.
# Settings (environment):
#   PCAPSYNC_CHECK_SUITE   Debian suite of the root (bookworm)
#   PCAPSYNC_CHECK_MIRROR  mirror for debootstrap (http://deb.debian.org/debian)
#   PCAPSYNC_CHECK_CACHE   where the root is kept between runs
#                          (/var/cache/pcapsync-systemd-check); delete it to
#                          make a new one
#   PCAPSYNC_CHECK_KEEP=1  keep the container's copy and logs (printed)
set -uo pipefail
cd "$(dirname "$0")/.."

suite=${PCAPSYNC_CHECK_SUITE:-bookworm}
mirror=${PCAPSYNC_CHECK_MIRROR:-http://deb.debian.org/debian}
cache=${PCAPSYNC_CHECK_CACHE:-/var/cache/pcapsync-systemd-check}
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
base=$cache/$suite-$arch

die() { echo "systemd-check: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "run as root (systemd-nspawn, debootstrap)"
for tool in systemd-nspawn debootstrap nsenter; do
	command -v "$tool" >/dev/null || die "needs $tool (apt-get install systemd-container debootstrap util-linux)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/pcapsync-systemd-check.XXXXXX")
nspawn_pid=
cleanup() {
	if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
		[ -n "${leader:-}" ] && in_ct systemctl poweroff >/dev/null 2>&1
		for _ in $(seq 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.5; done
		kill "$nspawn_pid" 2>/dev/null
		wait "$nspawn_pid" 2>/dev/null
	fi
	if [ "${PCAPSYNC_CHECK_KEEP:-}" = 1 ]; then
		echo "systemd-check: kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

passed=0 failed=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
fail() {
	echo "FAIL $1"
	[ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 25 | sed 's/^/    /'
	failed=$((failed + 1))
}
# check NAME CMD...: PASS if CMD succeeds, else FAIL with its output.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; fi
}
summary() {
	echo "systemd-check: $passed passed, $failed failed ($(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), kernel $(uname -r), systemd $(systemd-nspawn --version | head -n1 | awk '{print $2}') on the host, Debian $suite in the container)"
}

# --- the package -------------------------------------------------------
deb=${1:-}
if [ -z "$deb" ]; then
	echo "== building the package (scripts/package.sh)"
	scripts/package.sh "$work/pkg" >"$work/package.log" 2>&1 || { tail -n 30 "$work/package.log"; die "scripts/package.sh failed"; }
	deb=$(ls "$work"/pkg/pcapsync_*.deb)
fi
[ -f "$deb" ] || die "no package $deb"

# --- the root, cached --------------------------------------------------
if [ ! -e "$base/.complete" ]; then
	echo "== debootstrap $suite into $base (once; later runs reuse it)"
	rm -rf "$base.new"
	mkdir -p "$cache"
	if ! debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,libpcap0.8,iproute2 \
		"$suite" "$base.new" "$mirror" >"$work/debootstrap.log" 2>&1; then
		tail -n 30 "$work/debootstrap.log"
		die "debootstrap failed (log above; a mirror must be reachable)"
	fi
	rm -rf "$base" && mv "$base.new" "$base" && touch "$base/.complete"
fi
root=$work/root
cp -a "$base" "$root"
cp "$deb" "$root/var/tmp/pcapsync.deb" # nspawn mounts a tmpfs on /tmp

# --- boot ----------------------------------------------------------------
echo "== booting the container (systemd-nspawn -b)"
systemd-nspawn -D "$root" -b --register=no --keep-unit --private-network \
	-M pcapsync-check >"$work/console.log" 2>&1 </dev/null &
nspawn_pid=$!
leader=
for _ in $(seq 100); do
	kill -0 "$nspawn_pid" 2>/dev/null || break
	# The container's PID 1: systemd-nspawn's child, once it is systemd.
	for c in $(pgrep -P "$nspawn_pid"); do
		[ "$(cat "/proc/$c/comm" 2>/dev/null)" = systemd ] && leader=$c
	done
	[ -n "$leader" ] && break
	sleep 0.2
done
# in_ct CMD...: runs CMD in the container (its namespaces, as root).
in_ct() {
	nsenter -t "$leader" -m -u -i -n -p -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}
if [ -z "$leader" ]; then
	fail "boot: systemd-nspawn -b" "$(cat "$work/console.log")"
	summary
	exit 1
fi
# Until systemd answers on its socket, systemctl fails at once.
for _ in $(seq 120); do
	state=$(in_ct timeout 90 systemctl is-system-running --wait 2>&1)
	case $state in running | degraded) break ;; esac
	sleep 0.5
done
case $state in
running | degraded) pass "boot: systemd is $state" ;;
*)
	fail "boot: systemd is ${state:-not answering}" "$(in_ct systemctl --failed --no-legend 2>&1; tail -n 20 "$work/console.log")"
	summary
	exit 1
	;;
esac

# --- install --------------------------------------------------------------
check "install: dpkg -i" in_ct dpkg -i /var/tmp/pcapsync.deb
if [ "$failed" -gt 0 ]; then
	summary
	exit 1
fi
check "install: user and group pcapsync" in_ct sh -c '
	u=$(getent passwd pcapsync) && g=$(getent group pcapsync) || exit 1
	uid=$(echo "$u" | cut -d: -f3); gid=$(echo "$u" | cut -d: -f4)
	[ "$uid" -gt 0 ] && [ "$uid" -lt 1000 ] || { echo "uid $uid: not a system user"; exit 1; }
	[ "$gid" = "$(echo "$g" | cut -d: -f3)" ] || { echo "gid $gid is not group pcapsync"; exit 1; }
	case $u in *nologin) ;; *) echo "shell: $u"; exit 1 ;; esac
	[ "$(stat -c "%U:%G %a" /var/lib/pcapsync)" = "pcapsync:pcapsync 750" ] || { stat /var/lib/pcapsync; exit 1; }'
check "install: preset disabled, nothing enabled" in_ct sh -c '
	for u in pcapsync-agent.service pcapsync-collector.service pcapsync-writer.service pcapsync-agent@x.service; do
		p=$(systemctl show -p UnitFilePreset --value $u); e=$(systemctl is-enabled $u)
		[ "$p" = disabled ] && [ "$e" = disabled ] || { echo "$u: preset $p, $e"; exit 1; }
	done'

# --- certificates and settings, as docs/deploy.md ---------------------------
check "setup: certificates (pcapsync gen certs), keys for group pcapsync" in_ct sh -c '
	set -e
	pcapsync gen certs --dir /root/pki --collector 127.0.0.1,localhost --agents ct1
	cd /root/pki
	install -m 0644 ca.pem collector.pem /etc/pcapsync/
	install -m 0644 agent-ct1.pem /etc/pcapsync/agent.pem
	install -m 0640 -g pcapsync collector-key.pem /etc/pcapsync/
	install -m 0640 -g pcapsync agent-ct1-key.pem /etc/pcapsync/agent-key.pem'
# The collector's example file as it is; the agent's pointed at the
# collector, at lo and at the check's traffic, with its name (the CN).
check "setup: agent.conf" in_ct sh -c '
	set -e
	f=/etc/pcapsync/agent.conf
	sed -i -e "s/^collector = .*/collector = 127.0.0.1:7733/" -e "s/^iface = .*/iface = lo/" \
		-e "s/^filter = .*/filter = udp and dst port 9999/" $f
	echo "name = ct1" >>$f
	grep -q "^collector = 127.0.0.1:7733" $f && grep -q "^iface = lo" $f'

# wait_for SECONDS CMD...: runs CMD every half second until it succeeds.
wait_for() {
	local n=$(($1 * 2))
	shift
	for _ in $(seq "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	"$@"
}
# journal_has UNIT TEXT [journalctl args]: a line of UNIT's journal holds TEXT.
journal_has() {
	local unit=$1 text=$2
	shift 2
	in_ct journalctl -q --no-pager -u "$unit" -o cat "$@" | grep -qF -- "$text"
}
# captured: the packets of the check's traffic in the collector's files.
captured() {
	in_ct pcapsync query --dir /var/lib/pcapsync/captures -w /dev/null --summary json 'udp and dst port 9999' 2>&1 |
		grep -o '"packets":[0-9]*' | head -n1 | cut -d: -f2
}
captured_is() { [ "$(captured)" = "$1" ]; }

# --- start ----------------------------------------------------------------
check "start: systemctl enable --now pcapsync-collector" in_ct systemctl enable --now pcapsync-collector
check "start: collector listening" wait_for 20 journal_has pcapsync-collector "collector listening"
check "start: systemctl enable --now pcapsync-agent" in_ct systemctl enable --now pcapsync-agent
check "start: agent connected" wait_for 20 journal_has pcapsync-agent "connected to collector"

# caps UNIT USER EFF BND: the unit's main process runs as USER with
# CapEff EFF and CapBnd BND (hex, as /proc/PID/status shows them).
caps() {
	local pid status
	pid=$(in_ct systemctl show -p MainPID --value "$1")
	[ -n "$pid" ] && [ "$pid" != 0 ] || { echo "$1: no main process"; return 1; }
	status=$(in_ct cat "/proc/$pid/status") || return 1
	local uid want_uid eff bnd
	uid=$(echo "$status" | awk '/^Uid:/ {print $3}')
	want_uid=$(in_ct id -u "$2")
	eff=$(echo "$status" | awk '/^CapEff:/ {print $2}')
	bnd=$(echo "$status" | awk '/^CapBnd:/ {print $2}')
	echo "$1: pid $pid, euid $uid, CapEff $eff, CapBnd $bnd"
	[ "$uid" = "$want_uid" ] && [ "$eff" = "$3" ] && [ "$bnd" = "$4" ]
}
# CAP_NET_ADMIN is bit 12, CAP_NET_RAW bit 13.
check "capabilities: agent as pcapsync, CapEff and CapBnd net_admin+net_raw" caps pcapsync-agent pcapsync 0000000000003000 0000000000003000
check "capabilities: collector as pcapsync, none" caps pcapsync-collector pcapsync 0000000000000000 0000000000000000

# --- a capture ----------------------------------------------------------------
check "capture: traffic on lo (pcapsync gen udp)" in_ct pcapsync gen udp --to 127.0.0.1:9999 --count 500 --rate 2000 --stream 1
check "capture: 500 packets in the collector's files" wait_for 30 captured_is 500
check "capture: files owned by pcapsync, mode 0640" in_ct sh -c '
	n=$(find /var/lib/pcapsync/captures/ct1 -type f | wc -l)
	bad=$(find /var/lib/pcapsync/captures/ct1 -type f ! \( -user pcapsync -perm 0640 \) | head)
	[ "$n" -gt 0 ] && [ -z "$bad" ] || { echo "$n files; not pcapsync 0640: $bad"; exit 1; }'

# --- restart ----------------------------------------------------------------
since=$(in_ct date '+%Y-%m-%d %H:%M:%S')
check "restart: systemctl restart pcapsync-collector pcapsync-agent" in_ct systemctl restart pcapsync-collector pcapsync-agent
check "restart: agent connected again" wait_for 20 journal_has pcapsync-agent "connected to collector" --since "$since"
check "restart: traffic" in_ct pcapsync gen udp --to 127.0.0.1:9999 --count 500 --rate 2000 --stream 2
check "restart: the first 500 kept, 500 more written" wait_for 30 captured_is 1000
if journal_has pcapsync-agent "resending batches of the previous run" --since "$since"; then
	fail "restart: the agent's clean restart resends nothing" "$(in_ct journalctl -q -u pcapsync-agent -o cat --since "$since")"
else
	pass "restart: the agent's clean restart resends nothing"
fi

# --- the journal --------------------------------------------------------------
# An agent with ct1's certificate and another name: the collector
# rejects the handshake (a warning); the agent exits 1 (an error).
check "journal: a rejected agent (systemd-run)" in_ct sh -c '
	pcapsync gen file --out /tmp/intruder.pcap --count 10 >/dev/null &&
	! systemd-run --quiet --wait --unit=pcapsync-intruder -p User=pcapsync /usr/bin/pcapsync agent \
		--collector 127.0.0.1:7733 --name intruder --tls-ca /etc/pcapsync/ca.pem \
		--tls-cert /etc/pcapsync/agent.pem --tls-key /etc/pcapsync/agent-key.pem \
		--read /tmp/intruder.pcap --log-format json'
check "journal: -p warning shows the collector's warning" wait_for 10 journal_has pcapsync-collector "handshake rejected" -p warning
if journal_has pcapsync-collector "collector listening" -p warning; then
	fail "journal: info lines are not warnings" "$(in_ct journalctl -q -u pcapsync-collector -p warning -o cat)"
else
	pass "journal: info lines are not warnings"
fi
# priorities: the collector's journal records (-o json) of "collector
# listening" are at priority 6, of "handshake rejected" at 4.
priorities() {
	local j
	j=$(in_ct journalctl -q --no-pager -u pcapsync-collector -o json)
	echo "$j" | grep -F 'collector listening' | grep -q '"PRIORITY":"6"' &&
		echo "$j" | grep -F 'handshake rejected' | grep -q '"PRIORITY":"4"'
}
check "journal: priorities 6 and 4 (journalctl -o json)" priorities
check "journal: the rejected agent's exit is a JSON record at priority 3" journal_has pcapsync-intruder '"msg":"exit"' -p err

# --- a missing ReadWritePaths= directory --------------------------------------------
dropin=/etc/systemd/system/pcapsync-collector.service.d
# broken RWP: the collector's drop-in moves the root to /srv/pcap with
# ReadWritePaths=RWP; it must fail and stay failed, not restart.
broken() {
	in_ct sh -c "mkdir -p $dropin && printf '[Service]\nReadWritePaths=%s\nEnvironment=PCAPSYNC_DIR=/srv/pcap\n' '$1' >$dropin/check.conf &&
		systemctl daemon-reload && systemctl reset-failed pcapsync-collector; systemctl restart pcapsync-collector; true"
	sleep 12 # two RestartSec=5s: a restart would have happened by now
	local st
	st=$(in_ct systemctl show -p ActiveState -p NRestarts -p ExecMainStatus pcapsync-collector | sort | tr '\n' ' ')
	echo "$st"
	[ "$st" = "ActiveState=failed ExecMainStatus=$2 NRestarts=0 " ]
}
check "ReadWritePaths=/srv/pcap missing: failed (226/NAMESPACE), not restarted" broken /srv/pcap 226
check "ReadWritePaths=-/srv/pcap missing: failed (exit 2), not restarted" broken -/srv/pcap 2
check "ReadWritePaths=-/srv/pcap missing: the error gives the command" \
	journal_has pcapsync-collector "install -d -o pcapsync -g pcapsync -m 0750 /srv/pcap" -p err
check "ReadWritePaths=/srv/pcap made as documented: runs" in_ct sh -c "
	install -d -o pcapsync -g pcapsync -m 0750 /srv/pcap &&
	printf '[Service]\nReadWritePaths=/srv/pcap\nEnvironment=PCAPSYNC_DIR=/srv/pcap\n' >$dropin/check.conf &&
	systemctl daemon-reload && systemctl reset-failed pcapsync-collector && systemctl restart pcapsync-collector &&
	sleep 2 && systemctl is-active pcapsync-collector"
in_ct sh -c "rm -rf $dropin && systemctl daemon-reload" >/dev/null 2>&1

summary
[ "$failed" = 0 ]
