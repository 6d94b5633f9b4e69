// Package sockopt sets socket options the standard library does not
// reach: socket buffers beyond the system's limit (net.core.rmem_max and
// wmem_max), which a UDP receiver needs to absorb bursts without loss.
// It is portable: where an option does not exist it falls back to what
// the net package offers.
package sockopt
