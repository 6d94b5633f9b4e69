package kafkarec

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/wire"
)

func TestParseRecord(t *testing.T) {
	hello := wire.AppendHello(nil, &wire.Hello{Name: "web1", Host: "h", Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}}})
	other := wire.AppendHello(nil, &wire.Hello{Name: "db1"})
	stats := wire.AppendStats(nil, &wire.Stats{AgentDrops: 3})
	batch := append(wire.AppendHeader(nil, wire.TypeBatch, 0, 5), 1, 2, 3, 4, 5)
	big := append(wire.AppendHeader(nil, wire.TypeBatch, 0, 70<<10), make([]byte, 70<<10)...)
	rec := func(key string, value []byte, hellos ...[]byte) *kgo.Record {
		r := &kgo.Record{Key: []byte(key), Value: value}
		for _, h := range hellos {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HelloHeader, Value: h})
		}
		return r
	}
	tests := []struct {
		name string
		r    *kgo.Record
		want string // "" for accepted
	}{
		{"batch", rec("web1", batch, hello), ""},
		{"stats", rec("web1", stats, hello), ""},
		{"bad key", rec("../x", batch, hello), `bad record of "../x": key`},
		{"key differs from hello", rec("db1", batch, hello), "hello names agent"},
		{"no hello", rec("web1", batch), "no pcapsync-hello"},
		{"two hellos", rec("web1", batch, hello, hello), "two pcapsync-hello"},
		{"hello not a hello", rec("web1", batch, stats), "a stats frame"},
		{"hello truncated", rec("web1", batch, hello[:10]), "pcapsync-hello header"},
		{"hello of another agent", rec("web1", batch, other), "hello names agent"},
		{"value truncated", rec("web1", batch[:9], hello), "payload, 1 follow"},
		{"value short", rec("web1", batch[:3], hello), "shorter than a frame header"},
		{"value trailing bytes", rec("web1", append(append([]byte{}, batch...), 0), hello), "6 follow"},
		{"value a hello", rec("web1", hello, hello), "want batch or stats"},
		{"value over the limit", rec("web1", big, hello), "over limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRecord(tt.r, wire.Limits{MaxFrame: 64 << 10})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if r.Agent != "web1" || r.Hello.Name != "web1" || len(r.Hello.Interfaces) != 1 {
					t.Errorf("decoded %+v", r)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
			if !errors.Is(err, ErrRecord) {
				t.Errorf("error %v does not wrap ErrRecord", err)
			}
			if !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, wire.ErrTooLarge) && !errors.Is(err, wire.ErrBadName) {
				t.Errorf("error %v wraps neither wire.ErrMalformed, ErrTooLarge nor ErrBadName", err)
			}
		})
	}
}

// TestParseInfoHeader: a record's InfoHeader gives the agent's
// version; one that cannot be read leaves it unknown and says why,
// and the record is accepted all the same.
func TestParseInfoHeader(t *testing.T) {
	hello := wire.AppendHello(nil, &wire.Hello{Name: "web1", Host: "h", Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}}})
	batch := append(wire.AppendHeader(nil, wire.TypeBatch, 0, 5), 1, 2, 3, 4, 5)
	info := wire.AppendInfo(nil, &wire.Info{Version: "1.4.0 0123456789ab"})
	long := append(wire.AppendHeader(nil, wire.TypeInfo, 0, maxInfoHeader), make([]byte, maxInfoHeader)...)
	for _, tc := range []struct {
		name    string
		infos   [][]byte
		want    string // the version
		wantErr string // in InfoErr; "" for none
	}{
		{"none", nil, "", ""},
		{"version", [][]byte{info}, "1.4.0 0123456789ab", ""},
		{"empty info", [][]byte{wire.AppendInfo(nil, &wire.Info{})}, "", ""},
		{"two", [][]byte{info, info}, "", "2 pcapsync-info headers"},
		{"not printable", [][]byte{append(wire.AppendHeader(nil, wire.TypeInfo, 0, 4), 1, wire.InfoVersion, 1, 0x07)}, "", "not printable"},
		{"truncated", [][]byte{info[:len(info)-1]}, "", "pcapsync-info header"},
		{"not an info frame", [][]byte{hello}, "", "a hello frame"},
		{"over the limit", [][]byte{long}, "", "over limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecord("t", "web1", hello, nil, batch)
			for _, in := range tc.infos {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: InfoHeader, Value: in})
			}
			rec, err := ParseRecord(r, wire.Limits{MaxFrame: 64 << 10})
			if err != nil {
				t.Fatalf("record refused: %v", err)
			}
			if rec.Info.Version != tc.want {
				t.Errorf("version %q, want %q", rec.Info.Version, tc.want)
			}
			switch {
			case tc.wantErr == "" && rec.InfoErr != nil:
				t.Errorf("InfoErr %v, want none", rec.InfoErr)
			case tc.wantErr != "" && (rec.InfoErr == nil || !strings.Contains(rec.InfoErr.Error(), tc.wantErr)):
				t.Errorf("InfoErr %v, want one saying %q", rec.InfoErr, tc.wantErr)
			}
		})
	}
	if r := NewRecord("t", "web1", hello, info, batch); len(r.Headers) != 2 || r.Headers[1].Key != InfoHeader {
		t.Errorf("NewRecord with info: headers %v", r.Headers)
	}
}

// TestMaxFrame: a frame MaxFrame allows, with its key, hello and the
// longest Info frame of ours, fits the record limit.
func TestMaxFrame(t *testing.T) {
	hello := wire.AppendHello(nil, &wire.Hello{Name: "web1"})
	info := wire.AppendInfo(nil, &wire.Info{Version: strings.Repeat("v", wire.MaxVersionLen+10)})
	if len(info) > infoReserve {
		t.Fatalf("an Info frame of %d bytes, over the %d reserved", len(info), infoReserve)
	}
	m := MaxFrame(1<<20, "web1", hello)
	if m == 0 || int(m)+len("web1")+len(hello)+recordOverhead > 1<<20 {
		t.Errorf("MaxFrame %d does not fit 1 MiB with its key and hello", m)
	}
	if MaxFrame(100, "web1", hello) != 0 {
		t.Errorf("a frame fits a 100-byte record")
	}
}
