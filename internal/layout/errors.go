package layout

import "errors"

// ErrAgentDir: an agent's directory below the root is not a directory
// that can be read or written safely (a symbolic link, or not a
// directory): AgentFiles refuses it, and so does the Store's Writer,
// until it is put right by hand.
var ErrAgentDir = errors.New("agent directory refused")
