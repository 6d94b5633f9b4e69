package p

import "fmt"

/* A block comment. */
func f() string {
	return fmt.Sprint(1)
}
