package functrace

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// naiveGoroutineID is the usual parse, for comparison: the whole first
// stack buffer as a string, split into fields.
func naiveGoroutineID() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, err := strconv.ParseUint(strings.Fields(string(buf[:n]))[1], 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

func TestGoroutineID(t *testing.T) {
	main := goroutineID()
	if main == 0 || main != naiveGoroutineID() {
		t.Fatalf("goroutineID() = %d, naive parse %d", main, naiveGoroutineID())
	}
	const n = 8
	ids := make(chan uint64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			id := goroutineID()
			if naive := naiveGoroutineID(); id != naive {
				t.Errorf("goroutineID() = %d, naive parse %d", id, naive)
			}
			ids <- id
		})
	}
	wg.Wait()
	close(ids)
	seen := map[uint64]bool{main: true}
	for id := range ids {
		if seen[id] {
			t.Errorf("id %d seen twice", id)
		}
		seen[id] = true
	}
}

func TestParseGoroutineID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"goroutine 1 [running]:\nmain.main()", 1},
		{"goroutine 18446744073709551615 [running]:", 18446744073709551615},
		{"goroutine 123", 123},
		{"goroutine ", 0},
		{"", 0},
		{"gorout", 0},
		{"thread 5 [running]:", 0},
	} {
		if got := parseGoroutineID([]byte(tc.in)); got != tc.want {
			t.Errorf("parseGoroutineID(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestGoroutineIDAllocs(t *testing.T) {
	if a := testing.AllocsPerRun(100, func() { goroutineID() }); a != 0 {
		t.Errorf("goroutineID allocates %v times per call, want 0", a)
	}
}

// BenchmarkGoroutineID compares the in-place parse (fixed) with the
// naive one; both print the stack with runtime.Stack first.
func BenchmarkGoroutineID(b *testing.B) {
	b.Run("fixed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			goroutineID()
		}
	})
	b.Run("naive", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			naiveGoroutineID()
		}
	})
}
