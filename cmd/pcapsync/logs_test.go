package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// TestJSONLogDurations: JSON logs write every duration as Go writes it
// ("1.5s"), in groups too, not as integer nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var buf bytes.Buffer
	lf := logFlags{level: "info", format: "json"}
	log, err := lf.logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.With("idle", 90*time.Second).Info("m", "retry_in", 1500*time.Millisecond, slog.Group("g", "wait", time.Millisecond), "n", 7)
	var got struct {
		Idle  string `json:"idle"`
		Retry string `json:"retry_in"`
		G     struct {
			Wait string `json:"wait"`
		} `json:"g"`
		N int `json:"n"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if got.Idle != "1m30s" || got.Retry != "1.5s" || got.G.Wait != "1ms" || got.N != 7 {
		t.Errorf("JSON log line %s", buf.Bytes())
	}
}

// TestAgentJSONRetryIn: an agent that cannot reach its collector logs
// retry_in as a duration string under --log-format json.
func TestAgentJSONRetryIn(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(in, gen.FileConfig{Count: 10, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	stderr, _ := runBackground(t, "agent", "--name", "j1", "--collector", "127.0.0.1:1", "--read", in, "--insecure",
		"--log-format", "json", "--shutdown-timeout", "100ms")
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, line := range strings.Split(stderr.String(), "\n") {
			if !strings.Contains(line, `"retry_in"`) {
				continue
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			s, ok := rec["retry_in"].(string)
			if _, err := time.ParseDuration(s); !ok || err != nil {
				t.Fatalf("retry_in %v (%T), want a duration string: %s", rec["retry_in"], rec["retry_in"], line)
			}
			return nil
		}
		return errors.New("no log line with retry_in yet")
	})
}
