#!/bin/sh
# pcapsync preremove (deb: "remove", "upgrade NEW", ...; rpm: 0 erase,
# 1 upgrade). On removal, stops the units that run and disables them; an
# upgrade leaves them to the new package's postinstall, which restarts them.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
units="pcapsync-agent.service pcapsync-collector.service pcapsync-writer.service"
if [ -d /run/systemd/system ]; then
	systemctl stop $units 'pcapsync-agent@*.service' || true
fi
# Without a running systemd (a container, a chroot) disable still removes
# the links that enabled the units.
systemctl --no-reload disable $units >/dev/null 2>&1 || true
for link in /etc/systemd/system/*.wants/pcapsync-agent@*.service; do
	[ -L "$link" ] && rm -f "$link"
done
exit 0
