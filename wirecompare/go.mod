module github.com/pcapsync/pcapsync/wirecompare

go 1.26.8

replace github.com/pcapsync/pcapsync => ../

require (
	github.com/gogo/protobuf v1.3.2
	github.com/golang/snappy v1.0.0
	github.com/klauspost/compress v1.20.3
	github.com/pcapsync/pcapsync v0.0.0-00010101000000-000000000000
	github.com/pierrec/lz4/v4 v4.1.33
	github.com/planetscale/vtprotobuf v0.6.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/tinylib/msgp v1.6.5
	github.com/vmihailenco/msgpack/v5 v5.4.1
	golang.org/x/perf v0.0.0-20260908200009-22c9c6c9d4da
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/aclements/go-moremath v0.0.0-20210112150236-f10218a38794 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/mod v0.18.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/tools v0.22.0 // indirect
)

tool (
	github.com/gogo/protobuf/protoc-gen-gogofaster
	github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto
	github.com/tinylib/msgp
	golang.org/x/perf/cmd/benchstat
	google.golang.org/protobuf/cmd/protoc-gen-go
)
