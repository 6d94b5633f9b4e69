package main

import (
	"os"

	ft "github.com/pcapsync/pcapsync/internal/functrace"
)

func main() {
	ft.SetOutput(os.Stdout)
	run()
}

func run() {
	defer ft.Trace()()
}
