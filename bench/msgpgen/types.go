// Package msgpgen holds the comparison's packet record for
// github.com/tinylib/msgp, whose encoders and decoders are generated
// into types_gen.go by bench/gen.sh. Records are tuples (msgpack
// arrays, no keys on the wire), msgp's most compact form.
package msgpgen

//msgp:tuple Record

// Record is one captured packet; captured length is len(Data).
type Record struct {
	Timestamp int64  `msg:"ts"` // Unix nanoseconds
	IfIndex   uint32 `msg:"if"`
	OrigLen   uint32 `msg:"len"`
	Data      []byte `msg:"data"`
}

// Batch is the records of one source.
type Batch struct {
	Source  uint32   `msg:"src"`
	Records []Record `msg:"recs"`
}
