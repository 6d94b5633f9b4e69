package collector

import (
	"errors"

	"github.com/pcapsync/pcapsync/internal/fielderr"
)

// Errors callers test with errors.Is.
var (
	// ErrRejected wraps every reason a Hello is refused; the text after
	// it is what the agent is told (a Reject frame), and final for it.
	ErrRejected = errors.New("handshake rejected")

	// ErrBusy: a session cannot start yet (the previous connection of
	// its agent name is still ending, or the store cannot take the
	// agent: its files are still being repaired after a restart,
	// another process holds it, its lock or marks could not be read).
	// Transports close without a Reject, which an agent would take as
	// final, so that it retries with its backoff; a Kafka writer waits
	// and then starts over from its committed offsets, never skipping
	// the record.
	ErrBusy = errors.New("busy")

	// ErrStorage wraps a failed file operation (an error of the
	// store.Writer): nothing since the last acknowledgement is
	// acknowledged, and the file is left readable.
	ErrStorage = errors.New("storage error")

	// ErrInsecure is returned by Server.Serve when the Config has
	// neither TLS nor Insecure.
	ErrInsecure = errors.New("collector: no TLS configured and plain TCP not allowed (set Insecure)")

	// ErrUDPInsecure is returned by UDPServer.Serve when the Config does
	// not set Insecure: UDP has no encryption (no DTLS).
	ErrUDPInsecure = fielderr.Errorf("collector: UDP is plaintext (no DTLS): set Insecure ({collector.Insecure}) to accept it")

	// ErrSink wraps the error of a frame the sink could not make
	// durable: the session ends without acknowledging it, and the agent
	// resends.
	ErrSink = errors.New("sink error")
)
