package wirecompare

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestRoundTrip checks every codec and every operation on every
// workload: what is encoded decodes to the same records, the metadata
// sums match, and pooled decoding stays right when a smaller batch
// follows a larger one.
func TestRoundTrip(t *testing.T) {
	small, err := Generate(Headers, 7, 99)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range Workloads() {
		for _, c := range Codecs() {
			t.Run(w.Name+"/"+c.Name(), func(t *testing.T) {
				c.Load(&w.Batch)
				enc, err := c.Encode()
				if err != nil {
					t.Fatal(err)
				}
				app, err := c.AppendEncode(make([]byte, 0, 16))
				if err != nil {
					t.Fatal(err)
				}
				var to bytes.Buffer
				if err := c.EncodeTo(&to); err != nil {
					t.Fatal(err)
				}
				for name, p := range map[string][]byte{"Encode": enc, "AppendEncode": app, "EncodeTo": to.Bytes()} {
					v, err := c.Decode(p)
					if err != nil {
						t.Fatalf("Decode of %s: %v", name, err)
					}
					checkBatch(t, "Decode of "+name, c.Batch(v), &w.Batch)
				}
				m, err := c.DecodeMeta(enc)
				if err != nil {
					t.Fatal(err)
				}
				if want := MetaOf(&w.Batch); m != want {
					t.Errorf("DecodeMeta = %+v, want %+v", m, want)
				}

				if v, err := c.DecodeView(enc); err == nil {
					checkBatch(t, "DecodeView", c.Batch(v), &w.Batch)
				} else if !errors.Is(err, ErrUnsupported) {
					t.Fatalf("DecodeView: %v", err)
				}
				v, err := c.DecodePooled(enc)
				if errors.Is(err, ErrUnsupported) {
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				checkBatch(t, "DecodePooled", c.Batch(v), &w.Batch)
				c.Load(&small)
				p, err := c.Encode()
				if err != nil {
					t.Fatal(err)
				}
				if v, err = c.DecodePooled(p); err != nil {
					t.Fatal(err)
				}
				checkBatch(t, "DecodePooled after a larger batch", c.Batch(v), &small)
			})
		}
	}
}

func checkBatch(t *testing.T, what string, got Batch, want *Batch) {
	t.Helper()
	if got.Source != want.Source || len(got.Records) != len(want.Records) {
		t.Fatalf("%s: source %d, %d records; want %d, %d", what, got.Source, len(got.Records), want.Source, len(want.Records))
	}
	for i := range got.Records {
		if !reflect.DeepEqual(got.Records[i], want.Records[i]) {
			t.Fatalf("%s: record %d differs:\n got %+v\nwant %+v", what, i, got.Records[i], want.Records[i])
		}
	}
}

// TestDecodeOwnsMemory checks that Decode's records do not alias the
// encoded bytes, as its contract says.
func TestDecodeOwnsMemory(t *testing.T) {
	w := Workloads()[0]
	for _, c := range Codecs() {
		c.Load(&w.Batch)
		p, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		clear(p)
		checkBatch(t, c.Name()+" Decode after clearing its input", c.Batch(v), &w.Batch)
	}
}

// TestWireZeroAllocs pins the goal's zero allocations for the wire
// format on the realistic batch: encoding into a reused buffer, reading
// metadata, and decoding into pooled buffers.
func TestWireZeroAllocs(t *testing.T) {
	w := Workloads()[len(FixedSizes)]
	var c wireCodec
	c.Load(&w.Batch)
	buf, _ := c.AppendEncode(nil)
	p := bytes.Clone(buf)
	c.DecodePooled(p)
	ops := map[string]func(){
		"AppendEncode": func() { buf, _ = c.AppendEncode(buf) },
		"EncodeTo":     func() { c.EncodeTo(discard{}) },
		"DecodeMeta":   func() { c.DecodeMeta(p) },
		"DecodePooled": func() { c.DecodePooled(p) },
		"DecodeView":   func() { c.DecodeView(p) },
	}
	for name, op := range ops {
		if n := testing.AllocsPerRun(20, op); n != 0 {
			t.Errorf("%s: %v allocations per batch, want 0", name, n)
		}
	}
}

// TestGenerate checks the generated traffic: deterministic, increasing
// timestamps, valid lengths, and snaplen 128 for Headers.
func TestGenerate(t *testing.T) {
	for _, tr := range Traffics {
		a, err := Generate(tr, 500, 3)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(tr, 500, 3)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: not deterministic", tr)
		}
		for i, r := range a.Records {
			if i > 0 && r.Timestamp <= a.Records[i-1].Timestamp {
				t.Fatalf("%s: record %d: timestamp does not increase", tr, i)
			}
			if int(r.OrigLen) < len(r.Data) || len(r.Data) < 42 {
				t.Fatalf("%s: record %d: caplen %d origlen %d", tr, i, len(r.Data), r.OrigLen)
			}
			if tr == Headers && len(r.Data) > 128 {
				t.Fatalf("headers: record %d: caplen %d over snaplen 128", i, len(r.Data))
			}
		}
	}
	if _, err := Generate("nope", 1, 1); err == nil {
		t.Error("Generate of an unknown traffic kind: no error")
	}
	for _, n := range FixedSizes {
		if b := Fixed(n); len(b.Records[0].Data) != n {
			t.Errorf("Fixed(%d): %d bytes", n, len(b.Records[0].Data))
		}
	}
}

// discard is io.Discard without its ReadFrom fast paths.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
