package capture

import (
	"errors"
	"os"
	"strconv"
)

// Sentinel errors. Test for them with [errors.Is]; the errors the package
// returns usually wrap them with the interface name and the operation.
//
// ErrTimeout and ErrClosed are returned bare by [Handle.ReadInto] on its hot
// path, so their text carries the package prefix; the others are always
// wrapped in context that already does.
var (
	// ErrTimeout is returned by ReadInto when no packet arrived within
	// Config.PollTimeout. It is not a failure: call ReadInto again.
	ErrTimeout = errors.New("capture: timed out waiting for a packet")

	// ErrClosed is returned by ReadInto once Close has been called,
	// including to a ReadInto that was blocked when Close was called.
	ErrClosed = errors.New("capture: handle closed")

	// ErrNoInterface means the named interface does not exist in the
	// network namespace of the thread that called Open.
	ErrNoInterface = errors.New("no such interface")

	// ErrBadFilter means libpcap rejected the filter expression. The error
	// text carries libpcap's message.
	ErrBadFilter = errors.New("bad filter")

	// ErrFilterLimit is matched by the errors of CheckFilter: a filter
	// longer than MaxFilterLen or of more than MaxFilterTerms terms. The
	// error names the limit.
	ErrFilterLimit = errors.New("filter beyond the limits")

	// ErrUnsupportedLinkType means the interface's hardware type has no
	// LINKTYPE mapping here (only Ethernet, loopback and ARPHRD_NONE
	// devices such as tun and WireGuard are supported).
	ErrUnsupportedLinkType = errors.New("unsupported link type")

	// ErrInvalidConfig is matched by every error from Config.Validate.
	ErrInvalidConfig = errors.New("invalid capture config")

	// ErrInterfaceDown is returned by ReadInto when the kernel reported an
	// error on the socket while waiting: the interface went down or was
	// removed. The handle does not recover from it, even when the interface
	// comes back up (the socket error is never cleared, so every poll would
	// fail at once); ReadInto keeps returning it: Close and Open again.
	ErrInterfaceDown = errors.New("interface went down or was removed")

	// ErrPermission is returned by Open when the process may not create
	// a packet socket: it lacks CAP_NET_RAW. The error names the
	// interface and says how to grant the capability; it is returned
	// without further context.
	ErrPermission = errors.New("permission denied")

	// ErrNotSupported is returned by Open on platforms without AF_PACKET.
	ErrNotSupported = errors.New("live capture is only supported on linux")
)

// configError is what Validate returns: a plain message that still matches
// ErrInvalidConfig.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

// permError is ErrPermission for one interface.
type permError struct {
	iface string
	err   error // the system call's error
}

func (e *permError) Error() string {
	exe, err := os.Executable()
	if err != nil {
		exe = "/usr/bin/pcapsync"
	}
	return "capturing on " + strconv.Quote(e.iface) + " needs CAP_NET_RAW (" + e.err.Error() + "): run as root, or grant it: " +
		"setcap cap_net_raw+ep " + exe + ", or in a systemd unit AmbientCapabilities=CAP_NET_RAW (docs/privileges.md)"
}

func (e *permError) Is(target error) bool { return target == ErrPermission }
func (e *permError) Unwrap() error        { return e.err }

// filterError is a libpcap compile failure. iface is empty when the error
// comes from CompileFilter rather than Open.
type filterError struct {
	expr, iface, msg string
}

func (e *filterError) Error() string {
	if e.iface == "" {
		return "capture: compiling filter " + strconv.Quote(e.expr) + ": " + e.msg
	}
	return "capture: compiling filter " + strconv.Quote(e.expr) + " for " + e.iface + ": " + e.msg
}

func (e *filterError) Is(target error) bool { return target == ErrBadFilter }
