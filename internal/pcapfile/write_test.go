package pcapfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"testing"
)

func TestPcapWriterRoundTrip(t *testing.T) {
	const base = 1_700_000_000_123_456_789
	tests := []struct {
		name string
		nano bool
		// the timestamp read back for base+i
		want func(ts int64) int64
	}{
		{"microseconds", false, func(ts int64) int64 { return ts / 1000 * 1000 }},
		{"nanoseconds", true, func(ts int64) int64 { return ts }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewPcapWriter(&buf, 113, 65535, tt.nano)
			if err != nil {
				t.Fatal(err)
			}
			var want []Packet
			for i, size := range roundTripSizes {
				ts := base + int64(i)*999_999_999
				data := payload(size, byte(i))
				if err := w.WritePacket(ts, uint32(size*2), data); err != nil {
					t.Fatal(err)
				}
				want = append(want, Packet{Timestamp: tt.want(ts), OrigLen: uint32(size * 2), Data: data})
			}
			if err := w.WritePacket(0, 0, nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, Packet{})
			if w.Written() != int64(buf.Len()) {
				t.Errorf("Written() = %d, buffer holds %d", w.Written(), buf.Len())
			}
			r, got, err := readAll(t, buf.Bytes(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Nanosecond() != tt.nano {
				t.Errorf("Nanosecond() = %v, want %v", r.Nanosecond(), tt.nano)
			}
			if want := []Interface{{LinkType: 113, SnapLen: 65535}}; !reflect.DeepEqual(r.Interfaces(), want) {
				t.Errorf("Interfaces() = %+v, want %+v", r.Interfaces(), want)
			}
			comparePackets(t, got, want)
		})
	}
}

func TestPcapWriterHeader(t *testing.T) {
	tests := []struct {
		nano bool
		want []byte
	}{
		{false, []byte{0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0}},
		{true, []byte{0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("nanosecond=%v", tt.nano), func(t *testing.T) {
			var buf bytes.Buffer
			if _, err := NewPcapWriter(&buf, 1, 65535, tt.nano); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), tt.want) {
				t.Errorf("header % x, want % x", buf.Bytes(), tt.want)
			}
		})
	}
}

func TestPcapWriterErrors(t *testing.T) {
	tests := []struct {
		name string
		ts   int64
		want error
	}{
		{"negative timestamp", -1, ErrTimestampRange},
		{"after 2106", (math.MaxUint32 + 1) * 1e9, ErrTimestampRange},
		{"last second of 2106", math.MaxUint32*1e9 + 999_999_999, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewPcapWriter(io.Discard, 1, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WritePacket(tt.ts, 0, nil); !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("write error is sticky", func(t *testing.T) {
		w, err := NewPcapWriter(&failWriter{limit: 30}, 1, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		err = w.WritePacket(1, 100, payload(100, 0))
		if !errors.Is(err, errWrite) {
			t.Fatalf("error %v, want %v", err, errWrite)
		}
		if err2 := w.WritePacket(1, 1, nil); err2 != err {
			t.Errorf("second error %v, want sticky %v", err2, err)
		}
	})
}

func TestPcapWriterAllocs(t *testing.T) {
	w, err := NewPcapWriter(io.Discard, 1, 65535, true)
	if err != nil {
		t.Fatal(err)
	}
	data := payload(1500, 0)
	if allocs := testing.AllocsPerRun(1000, func() {
		if err := w.WritePacket(1_700_000_000_000_000_000, 1500, data); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("WritePacket allocates %v times per packet, want 0", allocs)
	}
}
