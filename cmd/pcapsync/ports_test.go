package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/metrics"
)

// metricsPorts is each command's metrics port, as the code defines it;
// status asks a collector's.
var metricsPorts = map[string]int{
	"agent":     metrics.DefaultAgentPort,
	"collector": metrics.DefaultCollectorPort,
	"writer":    metrics.DefaultWriterPort,
	"status":    metrics.DefaultCollectorPort,
}

// TestMetricsPortsAgree: deploy/*.conf and the documentation (README.md,
// docs/*.md) state each command's metrics port as the code defines it
// (metrics.DefaultXPort), and status asks the collector's. A port 97NN
// in a document belongs to the command named last before it on its
// line ("pcapsync CMD" wins over a bare name), or on the two lines
// before.
func TestMetricsPortsAgree(t *testing.T) {
	if metrics.DefaultStatusAddr != "127.0.0.1:"+strconv.Itoa(metrics.DefaultCollectorPort) {
		t.Errorf("status asks %s, not the collector's port on this host", metrics.DefaultStatusAddr)
	}
	confs, err := filepath.Glob("../../deploy/*.conf")
	if err != nil || len(confs) < 3 {
		t.Fatalf("deploy/*.conf: %q, %v", confs, err)
	}
	for _, f := range confs {
		command := strings.TrimSuffix(filepath.Base(f), ".conf")
		cf, err := readConfigFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range cf.settings {
			if s.name != "metrics" {
				continue
			}
			if want := metricsPorts[command]; !strings.HasSuffix(s.value, ":"+strconv.Itoa(want)) {
				t.Errorf("%s:%d: metrics = %s, want the %s's port %d", f, s.line, s.value, command, want)
			}
		}
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	checked := 0
	for _, f := range append(docs, "../../README.md") {
		checked += checkDocPorts(t, f)
	}
	if checked < 6 {
		t.Errorf("%d metrics ports found in the documentation: the pattern no longer matches it", checked)
	}
}

var (
	docPortRE    = regexp.MustCompile(`[: ](97\d\d)\b`)
	docCommandRE = regexp.MustCompile(`(?:^|[^-\w]|\bpcapsync-)(agent|collector|writer|status)\b`) // not --collector
	docInvokeRE  = regexp.MustCompile(`pcapsync (agent|collector|writer|status)\b`)
)

// checkDocPorts checks the metrics ports of the document f and returns
// how many it found.
func checkDocPorts(t *testing.T, f string) int {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	n := 0
	for i, line := range lines {
		for _, m := range docPortRE.FindAllStringSubmatchIndex(line, -1) {
			port, _ := strconv.Atoi(line[m[2]:m[3]])
			command := docCommandBefore(lines[max(0, i-2):i], line[:m[2]])
			want, ok := metricsPorts[command]
			switch {
			case !ok:
				t.Errorf("%s:%d: port %d of no command (name the command on the line): %s", f, i+1, port, line)
			case port != want:
				t.Errorf("%s:%d: port %d for %s, whose metrics port is %d: %s", f, i+1, port, command, want, line)
			}
			n++
		}
	}
	return n
}

// docCommandBefore is the command a port at the end of prefix belongs
// to: the last "pcapsync CMD" of prefix, else its last command name,
// else the last of the lines before.
func docCommandBefore(before []string, prefix string) string {
	if m := docInvokeRE.FindAllStringSubmatch(prefix, -1); m != nil {
		return m[len(m)-1][1]
	}
	if m := docCommandRE.FindAllStringSubmatch(prefix, -1); m != nil {
		return m[len(m)-1][1]
	}
	for i := len(before) - 1; i >= 0; i-- {
		if m := docCommandRE.FindAllStringSubmatch(before[i], -1); m != nil {
			return m[len(m)-1][1]
		}
	}
	return ""
}
