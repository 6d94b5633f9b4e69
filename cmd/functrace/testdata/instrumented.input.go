package p

import (
	"fmt"

	"github.com/pcapsync/pcapsync/internal/functrace"
)

func done() {
	defer functrace.Trace()()
	fmt.Println("done")
}

func short() { defer functrace.Trace()(); fmt.Println("short") }

func notYet() {
	fmt.Println("not yet")
}
