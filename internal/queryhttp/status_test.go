package queryhttp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestStatus: GET /status serves Config.Status as JSON behind the
// query's front door: refused without the client certificate or the
// token the listener requires, served with them; 404 where the process
// gave no status.
func TestStatus(t *testing.T) {
	dir := writeFixture(t, 2, "web1")
	certs := pkiDir(t)
	type page struct {
		Agents []string `json:"agents"`
	}
	srv := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, TLS: serverTLS(t, certs), Token: "s3cret",
		Status: func() any { return page{Agents: []string{"web1", "db1"}} }})
	bare := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
		want string // "" served; else in the error
	}{
		{"no certificate", ClientConfig{Addr: srv.Addr(), TLS: clientTLS(t, certs, "", ""), Token: "s3cret"}, "client certificate required"},
		{"no token", ClientConfig{Addr: srv.Addr(), TLS: clientTLS(t, certs, certs, "viewer")}, "token required"},
		{"wrong token", ClientConfig{Addr: srv.Addr(), TLS: clientTLS(t, certs, certs, "viewer"), Token: "nope"}, "wrong token"},
		{"plain, no token", ClientConfig{Addr: srv.Addr()}, "token required"},
		{"no status", ClientConfig{Addr: bare.Addr()}, "this listener serves no status"},
		{"admitted", ClientConfig{Addr: srv.Addr(), TLS: clientTLS(t, certs, certs, "viewer"), Token: "s3cret"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := FetchStatus(ctx, tc.cfg)
			if tc.want != "" {
				if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want ErrRefused with %q", err, tc.want)
				}
				return
			}
			var p page
			if err != nil || json.Unmarshal(b, &p) != nil || strings.Join(p.Agents, ",") != "web1,db1" {
				t.Fatalf("got %q, %v", b, err)
			}
		})
	}
}
