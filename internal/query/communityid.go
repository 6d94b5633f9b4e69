package query

import (
	"github.com/pcapsync/pcapsync/internal/flow"
)

// communityID is Config.CommunityID: "" passes every packet.
type communityID string

// match reports whether the packet data of link type lt has the
// Community ID c (flow.Decode's key, seed 0). It allocates nothing.
func (c communityID) match(lt uint16, data []byte) bool {
	if c == "" {
		return true
	}
	var k flow.Key
	flow.Decode(&k, uint32(lt), 0, data)
	var buf [flow.CommunityIDLen]byte
	return string(k.AppendCommunityID(buf[:0], 0)) == string(c)
}
