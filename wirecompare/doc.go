// Package wirecompare compares pcapsync's wire format with general-purpose
// encodings (encoding/json, JSON+gzip, vmihailenco/msgpack, tinylib/msgp,
// protobuf-go, vtprotobuf, gogo/protobuf) on the same packet records, and
// general-purpose compressors (lz4, s2, snappy, zstd) on batches of
// generated traffic. It is its own module so that none of these
// dependencies reach the product. The benchmarks live in the _test.go
// files; run.sh runs them and cmd/report turns the output into
// REPORT.md and chart.svg.
package wirecompare
