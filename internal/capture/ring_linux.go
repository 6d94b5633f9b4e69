//go:build linux

package capture

import (
	"sync/atomic"
	"unsafe"
)

// The one use of unsafe in this package: a block's status word is
// shared with the kernel, which sets it to TP_STATUS_USER after filling
// the block (with a write barrier) and reads it back to reuse the block.
// Reading it with an atomic load orders the reads of the block's
// packets after it; storing TP_STATUS_KERNEL atomically orders the
// reader's last reads of the block before the kernel may refill it.
// Both need a *uint32 into the mapping, which only unsafe can give.

// status returns the status word of the block at offset base.
func (r *ring) status(base int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[base+bdStatus])))
}

// release hands block i back to the kernel.
func (r *ring) release(i int) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&r.mem[i*r.blockSz+bdStatus])), 0) // TP_STATUS_KERNEL
}
