package privilege

import (
	"strings"
	"testing"
)

const statusRoot = `Name:	pcapsync
Umask:	0022
State:	S (sleeping)
Uid:	0	0	0	0
Gid:	0	0	0	0
Groups:	0 1 
NoNewPrivs:	0
CapInh:	0000000000000000
CapPrm:	000001ffffffffff
CapEff:	000001ffffffffff
CapBnd:	000001ffffffffff
CapAmb:	0000000000000000
Seccomp:	0
`

const statusDropped = `Uid:	65534	65534	65534	65534
Gid:	65534	65534	65534	65534
Groups:	65534 
NoNewPrivs:	1
CapInh:	0000000000000000
CapPrm:	0000000000002000
CapEff:	0000000000002000
CapBnd:	0000000000002000
CapAmb:	0000000000000000
`

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Creds
		wantErr string
	}{
		{"root", statusRoot, Creds{Groups: []int{0, 1}, Permitted: 1<<41 - 1, Effective: 1<<41 - 1, Bounding: 1<<41 - 1}, ""},
		{"dropped", statusDropped, Creds{UID: 65534, EUID: 65534, GID: 65534, EGID: 65534, Groups: []int{65534},
			Permitted: SetOf(NetRaw), Effective: SetOf(NetRaw), Bounding: SetOf(NetRaw), NoNewPrivs: true}, ""},
		{"no groups", strings.Replace(statusDropped, "Groups:\t65534 ", "Groups:\t", 1), Creds{UID: 65534, EUID: 65534, GID: 65534, EGID: 65534, Groups: []int{},
			Permitted: SetOf(NetRaw), Effective: SetOf(NetRaw), Bounding: SetOf(NetRaw), NoNewPrivs: true}, ""},
		{"truncated", statusDropped[:60], Creds{}, "credential lines missing"},
		{"bad hex", strings.Replace(statusDropped, "0000000000002000", "zz", 1), Creds{}, "CapPrm"},
		{"short uid", strings.Replace(statusDropped, "Uid:\t65534\t65534\t65534\t65534", "Uid:\t1", 1), Creds{}, "want real and effective"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want.String() {
				t.Errorf("got  %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dropped, err := parseStatus([]byte(statusDropped))
	if err != nil {
		t.Fatal(err)
	}
	root, err := parseStatus([]byte(statusRoot))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		c      Creds
		keep   Set
		groups []int
		want   []string // substrings of the complaint; none: no complaint
	}{
		{"as promised", dropped, SetOf(NetRaw), []int{65534}, nil},
		{"kept too much", dropped, 0, []int{65534}, []string{"effective capabilities CAP_NET_RAW, want none", "bounding"}},
		{"groups differ", dropped, SetOf(NetRaw), []int{65534, 4}, []string{"groups"}},
		{"still root", root, 0, []int{65534}, []string{"uid 0 euid 0, want 65534", "gid 0", "permitted capabilities all", "no_new_privs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.c, 65534, 65534, tt.groups, tt.keep)
			if len(tt.want) == 0 && got != "" {
				t.Fatalf("check: %s, want no complaint", got)
			}
			if len(tt.want) > 0 && got == "" {
				t.Fatalf("check found nothing wrong, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("check: %s\nwant it to say %q", got, w)
				}
			}
		})
	}
}

func TestSetString(t *testing.T) {
	for _, tt := range []struct {
		s    Set
		want string
	}{
		{0, "none"},
		{SetOf(NetRaw), "CAP_NET_RAW"},
		{SetOf(NetRaw, NetAdmin), "CAP_NET_ADMIN,CAP_NET_RAW"},
		{SetOf(1), "CAP_1"},
		{1<<41 - 1, "all"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("Set(%#x).String() = %q, want %q", uint64(tt.s), got, tt.want)
		}
	}
}
