// Package journal writes log lines that systemd's journal files at
// their level's priority.
//
// systemd connects a service's stdout and stderr to the journal and
// sets JOURNAL_STREAM to the device and inode of that stream. The
// journal reads a line that starts with "<N>" (N a syslog priority,
// sd-daemon(3)) at priority N and drops the prefix; any other line is
// filed at the unit's SyslogLevel, info by default. Stream tells
// whether a writer is that stream; Handler prefixes each record of an
// slog handler with its priority.
package journal
