package pktline

import "errors"

// ErrStream is wrapped by the error Print returns when the packets it
// reads are not a pcap or pcapng stream, or are cut off or damaged; an
// error writing the lines is returned as the writer gave it.
var ErrStream = errors.New("reading the packets")
