// Package msgpgen holds the comparison's packet record for
// github.com/tinylib/msgp, whose encoders and decoders are generated
// into types_gen.go by wirecompare/gen.sh. Records are tuples (msgpack
// arrays, no keys on the wire), msgp's most compact form.
package msgpgen

//msgp:tuple Record ViewRecord

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

// ViewRecord is Record whose data, when unmarshalled, aliases the input
// (msgp's zerocopy): for the zero-copy decode.
type ViewRecord struct {
	Timestamp int64  `msg:"ts"`
	IfIndex   uint32 `msg:"if"`
	OrigLen   uint32 `msg:"len"`
	Data      []byte `msg:"data,zerocopy"`
}

// ViewBatch is Batch of ViewRecords; the same bytes on the wire.
type ViewBatch struct {
	Source  uint32       `msg:"src"`
	Records []ViewRecord `msg:"recs"`
}
