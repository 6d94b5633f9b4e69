#!/bin/sh
# pcapsync postinstall (deb: "configure [OLD]"; rpm: 1 install, 2 upgrade).
# Creates the pcapsync system user and group and /var/lib/pcapsync; enables
# and starts nothing: the operator configures /etc/pcapsync first. On an
# upgrade, restarts the units that are running, so they run the new binary.
set -e

if ! getent group pcapsync >/dev/null; then
	groupadd --system pcapsync
fi
if ! getent passwd pcapsync >/dev/null; then
	useradd --system --gid pcapsync --no-create-home --home-dir /var/lib/pcapsync \
		--shell /usr/sbin/nologin --comment "pcapsync agent and collector" pcapsync
fi
if [ ! -d /var/lib/pcapsync ]; then
	install -d -o pcapsync -g pcapsync -m 0750 /var/lib/pcapsync
fi

upgrade=
case "$1" in
configure) if [ -n "$2" ]; then upgrade=1; fi ;;
2) upgrade=1 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ -n "$upgrade" ]; then
		systemctl try-restart pcapsync-agent.service pcapsync-collector.service \
			pcapsync-writer.service 'pcapsync-agent@*.service' || true
	fi
fi
exit 0
