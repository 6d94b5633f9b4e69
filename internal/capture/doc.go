// Package capture reads live packets from a Linux network interface.
//
// It uses an AF_PACKET socket with a TPACKET_V3 memory ring, read
// directly (capture_linux.go; the block status words are the one use of
// unsafe, in ring_linux.go): the kernel writes packets into blocks of a
// ring shared with the process, and ReadInto hands them out without
// copying, walking a block's packets in place and giving the block back
// when it moves to the next. (gopacket's afpacket did this until issue
// 4's profile of a live agent showed its per-packet mutex, interface
// calls and time.Time at a third of the agent's CPU.) Filters use tcpdump syntax; libpcap compiles
// them to classic BPF (filter.go, the only file that needs cgo) and the
// kernel runs them, so unwanted packets never reach the ring.
//
// Typical use:
//
//	h, err := capture.Open(capture.Config{Interface: "eth0", Filter: "udp port 53"})
//	if err != nil {
//		return err
//	}
//	defer h.Close()
//	var p capture.Packet
//	for {
//		switch err := h.ReadInto(&p); {
//		case err == nil:
//			consume(p.Timestamp, p.OrigLen, p.Data) // p.Data valid until the next ReadInto
//		case errors.Is(err, capture.ErrTimeout):
//			// nothing for PollTimeout: check for shutdown, flush, ...
//		default:
//			return err // ErrClosed after Close, ErrInterfaceDown, ...
//		}
//	}
//
// # Behaviour, as tcpdump users expect it
//
//   - Promiscuous mode is on unless Config.NoPromisc; the snapshot length
//     defaults to 262144 bytes.
//   - No packet that fails the filter or exceeds the snapshot length is ever
//     returned, not even one that arrived while Open ran: Open installs a
//     reject-all filter, drains the ring, then installs the real filter.
//   - On loopback each packet is returned once (the incoming copy), not
//     twice.
//   - 802.1Q tags that the kernel stripped are put back into the frame.
//   - Stats mirror tcpdump's "received by filter" (which includes drops)
//     and "dropped by kernel", accumulated into 64 bits.
//   - Timestamps have nanosecond resolution.
//
// # Zero copy and Close
//
// Packet.Data aliases the ring until the next ReadInto or Close. Close may
// be called from another goroutine while ReadInto is blocked: ReadInto
// polls in slices of at most 50ms and checks a closed flag between them;
// Close sets the flag, waits for the reader to leave ReadInto (it returns
// ErrClosed), and only then closes the socket and unmaps the ring. It must
// wait because unmapping the ring under a reader would crash it, and a
// poll(2) in progress on the socket is not woken by close(2). Bytes from an earlier ReadInto must not
// be touched once Close has returned.
//
// # Namespaces and privileges
//
// Open needs CAP_NET_RAW and no other capability: promiscuous mode
// (PACKET_ADD_MEMBERSHIP), the filters and the mapped ring need none (the
// ring is not counted against RLIMIT_MEMLOCK). Without it Open returns an
// error matching ErrPermission that says how to grant it. An open handle
// keeps working after the process gives its capabilities up (the kernel
// checks them when the socket is created), so a process started as root
// can open its captures and then drop to a user (internal/privilege).
//
// Open looks the interface up, and binds the socket,
// in the network namespace of the calling OS thread; the socket stays
// there, so a goroutine locked to its thread can setns(2) into a
// namespace, Open, and switch back. The link type is read with
// SIOCGIFHWADDR for the same reason: /sys/class/net shows the namespace
// sysfs was mounted in.
//
// # Filters from outside
//
// libpcap compiles one filter at a time in a process and cannot be
// interrupted; its time grows with about the cube of a filter's terms.
// CheckFilter bounds a filter from outside (a query's, a tap client's)
// to MaxFilterLen bytes and MaxFilterTerms terms before it is compiled;
// CompileFilterContext waits for the compiles before it only as long
// as its context lasts. FilterCompiles counts the compiles.
//
// A filter run in user space on stored packets (a query's, the tap's)
// is compiled with CompileFileFilterContext, as tcpdump -r compiles it
// for a file of the packet's link type; one for the kernel with
// CompileFilter, as for a live capture.
//
// # Portability
//
// The API compiles everywhere; on other systems Open returns
// ErrNotSupported. Without cgo, CompileFilter (and Open) accept only the
// empty filter.
package capture
