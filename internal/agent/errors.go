package agent

import "errors"

// ErrRejected is returned when the collector refuses the handshake;
// the error text carries its reason.
var ErrRejected = errors.New("collector rejected the agent")

// ErrTLS is returned when the first connection fails TLS
// authentication: the collector's certificate does not verify, the
// collector refuses the agent's, or one side does not speak TLS. The
// error text says which.
var ErrTLS = errors.New("TLS with the collector failed")

// ErrNoSecurity is matched by Config.Validate's error when the Config
// chooses neither TLS nor Insecure (and no Kafka): a program can then
// say how its user chooses.
var ErrNoSecurity = errors.New("no transport security chosen")
