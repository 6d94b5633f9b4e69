package pcapfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func TestOpenDecompresses(t *testing.T) {
	var plain bytes.Buffer
	w := ethWriter(t, &plain, "eth0", 65535)
	for i := range 100 {
		w.WritePacket(0, int64(i), 60, bytes.Repeat([]byte{byte(i)}, 60))
	}
	data := plain.Bytes()
	gz := func(parts ...[]byte) []byte { // one gzip member per part
		var b bytes.Buffer
		for _, p := range parts {
			zw := gzip.NewWriter(&b)
			zw.Write(p)
			zw.Close()
		}
		return b.Bytes()
	}
	zenc, _ := zstd.NewWriter(nil)
	files := map[string][]byte{
		"plain.pcapng":      data,
		"one.pcapng.gz":     gz(data),
		"members.pcapng.gz": gz(data[:1000], data[1000:3000], data[3000:]),
		"frame.pcapng.zst":  zenc.EncodeAll(data, nil),
		"misnamed.pcapng":   gz(data), // recognised by content, not name
	}
	dir := t.TempDir()
	for name, b := range files {
		path := filepath.Join(dir, name)
		os.WriteFile(path, b, 0o600)
		f, err := Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes, %v; want the %d bytes written", name, len(got), err, len(data))
		}
	}
	bad := filepath.Join(dir, "bad.gz")
	os.WriteFile(bad, []byte{0x1f, 0x8b, 0, 0}, 0o600)
	if f, err := Open(bad); err == nil {
		f.Close()
		t.Error("a broken gzip header opened without error")
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file opened")
	}
}

// TestOpenZstdWindow: Open reads a zstd file whose window is up to
// OpenMaxZstdWindow (zstd --long's 128 MiB) and refuses one declaring
// more, before its decoder holds it.
func TestOpenZstdWindow(t *testing.T) {
	var plain bytes.Buffer
	w := ethWriter(t, &plain, "eth0", 65535)
	for i := range 300 { // more than a block: the encoder declares its window
		w.WritePacket(0, int64(i), 8192, make([]byte, 8192))
	}
	dir := t.TempDir()
	for _, c := range []struct {
		window int
		ok     bool
	}{{8 << 20, true}, {OpenMaxZstdWindow, true}, {2 * OpenMaxZstdWindow, false}} {
		var b bytes.Buffer
		zw, err := zstd.NewWriter(&b, zstd.WithWindowSize(c.window), zstd.WithSingleSegment(false))
		if err != nil {
			t.Fatal(err)
		}
		zw.Write(plain.Bytes())
		zw.Close()
		path := filepath.Join(dir, "w.pcapng.zst")
		os.WriteFile(path, b.Bytes(), 0o600)
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		switch {
		case c.ok && (err != nil || !bytes.Equal(got, plain.Bytes())):
			t.Errorf("window %d MiB: %d bytes, %v; want the file", c.window>>20, len(got), err)
		case !c.ok && !errors.Is(err, zstd.ErrWindowSizeExceeded):
			t.Errorf("window %d MiB: %d bytes, %v; want it refused", c.window>>20, len(got), err)
		}
	}
}
