module github.com/pcapsync/pcapsync

go 1.26.8

require (
	github.com/gopacket/gopacket v1.7.7
	github.com/klauspost/compress v1.20.3
	github.com/pierrec/lz4/v4 v4.1.33
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)
