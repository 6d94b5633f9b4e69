#!/bin/sh
# pcapsync postremove (deb: "remove", "purge", "upgrade NEW", ...; rpm:
# 0 erase, 1 upgrade). dpkg removes the conffiles on purge; this removes
# what else the package made: the agents' spools under /var/lib/pcapsync
# and /var/lib/pcapsync itself when nothing else is left there. It keeps
# the output root (/var/lib/pcapsync/captures: the captured packets), the
# keys and certificates the operator put in /etc/pcapsync, and the
# pcapsync user and group, which may still own those files.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
[ "$1" = purge ] || exit 0

rm -f /etc/pcapsync/*.dpkg-old /etc/pcapsync/*.dpkg-dist /etc/pcapsync/*.dpkg-new \
	/etc/pcapsync/*.dpkg-tmp
rmdir /etc/pcapsync 2>/dev/null || true
rm -rf /var/lib/pcapsync/spool /var/lib/pcapsync/spool-*
rmdir /var/lib/pcapsync 2>/dev/null || true
exit 0
