package p

import (
	"fmt"
	"os"

	"github.com/pcapsync/pcapsync/internal/wire"
)

func f() {
	fmt.Fprintln(os.Stderr, wire.Codec(0))
}

func init() {
	f() // trailing comment
}
