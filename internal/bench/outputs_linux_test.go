package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestOutputFiles: the pipeline counts the packets of the collector's
// files whether plain, gzip or zstd (--file-compress), and nothing else
// in the agent's directory (indexes, flow files, parts).
func TestOutputFiles(t *testing.T) {
	var file bytes.Buffer
	w, err := pcapfile.NewNgWriter(&file, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(pcapfile.Interface{LinkType: 1, SnapLen: 65535}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := w.WritePacket(0, int64(i), 60, make([]byte, 60)); err != nil {
			t.Fatal(err)
		}
	}
	var gz, zs bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(file.Bytes())
	gw.Close()
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(file.Bytes())
	zw.Close()
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"a_1.pcapng":          file.Bytes(),
		"a_2.pcapng.gz":       gz.Bytes(),
		"a_3.pcapng.zst":      zs.Bytes(),
		"a_3.pcapng.zst.idx":  []byte("not a capture"),
		"a_4.pcapng.zst.part": []byte("not a capture"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := outputFiles(dir)
	if err != nil || len(files) != 3 {
		t.Fatalf("files %v (%v), want the plain, gzip and zstd one", files, err)
	}
	if err := checkPackets(30, files...); err != nil {
		t.Fatal(err)
	}
}
