package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestRedisFlags: bad --redis* flags of the collector and of tail are
// usage errors that name the flag.
func TestRedisFlags(t *testing.T) {
	coll := []string{"collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0"}
	tail := []string{"tail", "--agent", "a"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(coll, "--redis-maxlen", "5"), "--redis-maxlen needs --redis"},
		{append(coll, "--redis-compress", "zstd"), "--redis-compress needs --redis"},
		{append(coll, "--redis", "redis://127.0.0.1:1", "--redis-maxlen", "5", "--redis-max-age", "1m"), "exclude each other"},
		{append(coll, "--redis", "redis://127.0.0.1:1", "--redis-compress", "lz4"), "entry compression lz4: want none, s2 or zstd[:1-22]"},
		{append(coll, "--redis", "redis://127.0.0.1:1", "--redis-compress", "zstd:99"), "zstd level"},
		{append(coll, "--redis", "http://127.0.0.1:1"), "redis feed"},
		{append(coll, "--redis", "redis://127.0.0.1:1", "--redis-maxlen", "-1"), "negative"},
		{append(tail, "--redis", "redis://127.0.0.1:1", "--count", "-1"), "count (--count)"},
		{append(tail, "--redis", "redis://127.0.0.1:1", "--from", "-1s"), "start (--from)"},
		{append(tail, "--redis", "redis://127.0.0.1:1", "--filter", "udp port 99999"), "--filter"},
		{append(tail, "--collector-admin", "127.0.0.1:1", "--insecure", "--until-idle", "5s"), "--until-idle works with --redis only"},
		{append(tail, "--redis", "nope://x"), "--redis"},
		{[]string{"tail", "--redis", "redis://127.0.0.1:1"}, "tail --redis needs --agent"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
