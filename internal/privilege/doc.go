// Package privilege gives up root: it switches a process started as
// root to an unprivileged user and keeps only the Linux capabilities
// the caller names, as tcpdump -Z does once its capture is open.
//
// Linux keeps credentials per thread, and a Go program runs on several
// threads that the runtime treats as interchangeable, so every change is
// made on all of them at once (libcap's psx mechanism, which works with
// and without cgo): the supplementary groups, group and user ids, the
// permitted, effective and inheritable capability sets, the ambient set,
// the bounding set and the no_new_privs flag. Drop then reads the
// result back from /proc/self/task/*/status and fails unless every
// thread shows it; a process that could not give up what it was asked
// to give up should not carry on.
//
// Capture sockets, listening sockets and files opened before Drop stay
// usable afterwards: the kernel checks privileges when a socket or file
// is opened, not when it is used.
//
// Read, for any process, reports the credentials /proc shows. On systems
// other than Linux, Drop returns ErrNotSupported.
package privilege
