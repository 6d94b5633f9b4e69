package kafkarec

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrRecord wraps every error of ParseRecord: the record is not one
	// this package writes (its key, hello header or value is wrong) and
	// will never be; the text after it says why.
	ErrRecord = errors.New("bad record")

	// ErrProduce wraps the brokers' error for a record Producer.Send
	// could not make durable (given to its done), and for the records
	// still unanswered when Close gave up waiting.
	ErrProduce = errors.New("kafka produce failed")

	// ErrUnauthenticated: a record without a valid MAC header where a
	// RecordKey is in force (RecordKey.Verify); it was not produced by a
	// holder of its agent's key (or the topic's), or was changed since.
	ErrUnauthenticated = errors.New("record not authenticated by the record key")

	// ErrShortKey: a record key shorter than MinRecordKey.
	ErrShortKey = errors.New("record key too short")

	// ErrBadKeyFile: a record key file that starts as an agent's key
	// and is not one, or an agent's key where the topic's is needed.
	ErrBadKeyFile = errors.New("bad record key file")
)
