package tap

import (
	"strings"
	"testing"
)

// FuzzParseRequest: no input panics or is accepted over MaxRequest, and
// what parses formats back to a line that parses to the same request
// (a filter's white space normalised), within MaxRequest if the input was
// short enough to allow for escaping.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"", "\n", Proto, Proto + "\n", Proto + " agent=web1\n", Proto + " agent=* iface=eth0 token=a%20b filter=udp port 53\r\n",
		Proto + " filter=", Proto + " agent=a agent=b", Proto + " token=%zz", Proto + "x", "GET / HTTP/1.1\r\n",
		Proto + " iface=" + strings.Repeat("e", MaxRequest),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseRequest(line)
		if err != nil {
			return
		}
		if len(strings.TrimSuffix(line, "\n")) >= MaxRequest {
			t.Fatalf("accepted a line of %d bytes", len(line))
		}
		again, err := ParseRequest(FormatRequest(r))
		r.Filter = strings.Join(strings.Fields(r.Filter), " ")
		if err != nil && !strings.Contains(err.Error(), "longer than") {
			t.Fatalf("FormatRequest(%+v) does not parse: %v", r, err)
		}
		if err == nil && again != r {
			t.Fatalf("round trip: %+v, want %+v", again, r)
		}
	})
}
