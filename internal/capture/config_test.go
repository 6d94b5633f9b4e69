package capture

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	page := os.Getpagesize()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "" means valid; otherwise the exact message
	}{
		{"defaults", Config{Interface: "eth0"}, ""},
		{"everything set", Config{Interface: "eth0", Filter: "tcp", SnapLen: 100, NoPromisc: true,
			RingSize: 1 << 20, BlockSize: page, BlockTimeout: time.Millisecond, PollTimeout: time.Second}, ""},
		{"wait forever", Config{Interface: "eth0", PollTimeout: -1}, ""},
		{"max snaplen", Config{Interface: "eth0", SnapLen: MaxSnapLen}, ""},
		{"no interface", Config{}, "capture: interface name is required"},
		{"long interface", Config{Interface: "abcdefghijklmnop"}, `capture: interface name "abcdefghijklmnop" longer than 15 bytes`},
		{"slash", Config{Interface: "a/b"}, `capture: invalid interface name "a/b": contains '/', ':', NUL or white space`},
		{"dotdot", Config{Interface: ".."}, `capture: invalid interface name ".."`},
		{"snaplen too big", Config{Interface: "eth0", SnapLen: 70000000}, "capture: snaplen 70000000 out of range 1..262144"},
		{"snaplen negative", Config{Interface: "eth0", SnapLen: -1}, "capture: snaplen -1 out of range 1..262144"},
		{"block not page multiple", Config{Interface: "eth0", SnapLen: 100, BlockSize: page + 1},
			"capture: block size " + itoa(page+1) + " is not a multiple of the page size " + itoa(page)},
		{"block smaller than snaplen", Config{Interface: "eth0", BlockSize: page}, ""},
		{"block too big", Config{Interface: "eth0", BlockSize: 2 << 30},
			"capture: block size 2147483648 out of range " + itoa(page) + "..1073741824"},
		{"ring negative", Config{Interface: "eth0", RingSize: -5}, "capture: ring size -5 is negative"},
		{"ring time", Config{Interface: "eth0", RingTime: 5 * time.Second}, ""},
		{"ring time negative", Config{Interface: "eth0", RingTime: -time.Second}, "capture: ring time -1s out of range 0..1m0s"},
		{"ring size and time", Config{Interface: "eth0", RingSize: 1 << 20, RingTime: time.Second}, "capture: ring size and ring time exclude each other"},
		{"block timeout too small", Config{Interface: "eth0", BlockTimeout: time.Microsecond}, "capture: block timeout 1µs out of range 1ms..1m0s"},
		{"block timeout negative", Config{Interface: "eth0", BlockTimeout: -time.Second}, "capture: block timeout -1s out of range 1ms..1m0s"},
		{"poll timeout too small", Config{Interface: "eth0", PollTimeout: 500 * time.Microsecond},
			"capture: poll timeout 500µs below 1ms (poll(2) counts whole milliseconds)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.wantErr)
			}
			if err.Error() != tt.wantErr {
				t.Errorf("Validate() = %q\nwant          %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Validate() error does not match ErrInvalidConfig")
			}
		})
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

func TestSettings(t *testing.T) {
	tests := []struct {
		name          string
		cfg           Config
		wantBlocks    int
		wantSlice     time.Duration
		wantSlices    int
		wantBlockTmo  time.Duration
		wantBlockSize int
		wantSnapLen   int
	}{
		// A 10 ms timeout: 150 blocks hold 1.5 s by time, but 1.5 s of
		// 20 000 packets/s of 600+96 bytes need 160 blocks of 128 KiB.
		// The default blocks hold the largest frame: tcpdump's default
		// snaplen stands.
		{"defaults", Config{Interface: "x"}, 160, 50 * time.Millisecond, 2, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"ring rounded up", Config{Interface: "x", RingSize: 3<<20 + 1}, 25, 50 * time.Millisecond, 2, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"at least two blocks", Config{Interface: "x", RingSize: 1}, 2, 50 * time.Millisecond, 2, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"short poll", Config{Interface: "x", PollTimeout: 30 * time.Millisecond}, 160, 30 * time.Millisecond, 1, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"poll split evenly", Config{Interface: "x", PollTimeout: 120 * time.Millisecond}, 160, 40 * time.Millisecond, 3, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"poll rounded up to ms", Config{Interface: "x", PollTimeout: 51 * time.Millisecond}, 160, 26 * time.Millisecond, 2, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"poll forever", Config{Interface: "x", PollTimeout: -1}, 160, 50 * time.Millisecond, 0, 10 * time.Millisecond, 128 << 10, DefaultSnapLen},
		// The agent's timeout at its default flush: a block every 3 ms,
		// 500 of them for 1.5 s (62.5 MiB).
		{"block timeout truncated", Config{Interface: "x", BlockTimeout: 3125 * time.Microsecond}, 500, 50 * time.Millisecond, 2, 3 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"ring time", Config{Interface: "x", BlockTimeout: 4 * time.Millisecond, RingTime: 4 * time.Second}, 1000, 50 * time.Millisecond, 2, 4 * time.Millisecond, 128 << 10, DefaultSnapLen},
		{"timed ring bounded", Config{Interface: "x", BlockTimeout: time.Millisecond, RingTime: time.Minute}, MaxTimedRing / (128 << 10), 50 * time.Millisecond, 2, time.Millisecond, 128 << 10, DefaultSnapLen},
		{"big blocks keep the snaplen", Config{Interface: "x", BlockSize: 512 << 10, BlockTimeout: 3 * time.Millisecond}, 500, 50 * time.Millisecond, 2, 3 * time.Millisecond, 512 << 10, DefaultSnapLen},
		{"small snaplen", Config{Interface: "x", SnapLen: 1500, RingSize: 1 << 20}, 8, 50 * time.Millisecond, 2, 10 * time.Millisecond, 128 << 10, 1500},
		{"snaplen between", Config{Interface: "x", SnapLen: 200000, RingSize: 1 << 20}, 8, 50 * time.Millisecond, 2, 10 * time.Millisecond, 128 << 10, 200000},
		// 64 KiB blocks hold less than the largest frame: they cut
		// every snaplen above what they hold.
		{"small blocks cut the snaplen", Config{Interface: "x", BlockSize: 64 << 10, RingSize: 1 << 20}, 16, 50 * time.Millisecond, 2, 10 * time.Millisecond, 64 << 10, 64<<10 - BlockOverhead},
		{"small blocks, small snaplen", Config{Interface: "x", BlockSize: 64 << 10, SnapLen: 60000, RingSize: 1 << 20}, 16, 50 * time.Millisecond, 2, 10 * time.Millisecond, 64 << 10, 60000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s := tt.cfg.settings()
			if s.numBlocks != tt.wantBlocks || s.pollSlice != tt.wantSlice || s.pollSlices != tt.wantSlices ||
				s.blockTimeout != tt.wantBlockTmo || s.blockSize != tt.wantBlockSize || s.snapLen != tt.wantSnapLen {
				t.Errorf("settings() = %+v, want blocks %d of %d, poll %d x %v, block timeout %v",
					s, tt.wantBlocks, tt.wantBlockSize, tt.wantSlices, tt.wantSlice, tt.wantBlockTmo)
			}
			if !s.promisc {
				t.Errorf("settings() = %+v, want promiscuous mode", s)
			}
		})
	}
}

func TestGatherWait(t *testing.T) {
	const block = 64 << 10
	tests := []struct {
		name      string
		n, block  int
		tov, poll time.Duration
		want      time.Duration // within a microsecond
	}{
		// 499 free blocks of 64 KiB at 100 Gbit/s: 2.6 ms, in whole ms.
		{"64 KiB blocks", 500, block, 3 * time.Millisecond, 50 * time.Millisecond, 2 * time.Millisecond},
		// Of 128 KiB: 5.2 ms, more than the block timeout.
		{"agent default", 500, DefaultBlockSize, 3 * time.Millisecond, 50 * time.Millisecond, 3 * time.Millisecond},
		{"a block timeout at most", 4096, 1 << 20, 3 * time.Millisecond, 50 * time.Millisecond, 3 * time.Millisecond},
		{"a poll slice at most", 4096, 1 << 20, 10 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond},
		{"smallest ring that gathers", 192, block, 3 * time.Millisecond, 50 * time.Millisecond, time.Millisecond},
		{"too small to gather", 191, block, 3 * time.Millisecond, 50 * time.Millisecond, 0},
		{"two blocks", 2, block, 3 * time.Millisecond, 50 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gatherWait(tt.n, tt.block, tt.tov, tt.poll)
			if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("gatherWait(%d, %d, %v, %v) = %v, want %v", tt.n, tt.block, tt.tov, tt.poll, got, tt.want)
			}
		})
	}
	// The agent's configuration at the default flush.
	c := Config{Interface: "x", BlockTimeout: 3 * time.Millisecond, PollTimeout: 6 * time.Millisecond}
	if s := c.settings(); s.gather != gatherWait(500, DefaultBlockSize, 3*time.Millisecond, 6*time.Millisecond) {
		t.Errorf("settings() = %+v, want the gathering wait of 500 blocks", s)
	}
}

// TestOpenErrors needs no privileges: every case fails before a socket is
// made.
func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		wantErr    error
		wantPrefix string
	}{
		{"no such interface", Config{Interface: "pcs-nonexist0"}, ErrNoInterface, `capture: opening "pcs-nonexist0": no such interface`},
		{"bad filter", Config{Interface: "lo", Filter: "tcp prt 80"}, ErrBadFilter, `capture: compiling filter "tcp prt 80" for lo: `},
		{"bad snaplen", Config{Interface: "lo", SnapLen: 70000000}, ErrInvalidConfig, "capture: snaplen 70000000 out of range 1..262144"},
		{"no interface name", Config{Filter: "tcp"}, ErrInvalidConfig, "capture: interface name is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Open(tt.cfg)
			if err == nil {
				h.Close()
				t.Fatalf("Open(%+v) succeeded, want %v", tt.cfg, tt.wantErr)
			}
			if errors.Is(err, ErrNotSupported) {
				t.Skip("skipping: no live capture on this platform")
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Open() = %v, want an error matching %v", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantPrefix) {
				t.Errorf("Open() = %q, want it to start with %q", err, tt.wantPrefix)
			}
			t.Logf("%v", err)
		})
	}
}
