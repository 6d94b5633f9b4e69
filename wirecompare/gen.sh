#!/usr/bin/env bash
# Regenerates the comparison's generated code from proto/packet.proto and
# msgpgen/types.go: pb/ (protoc-gen-go and protoc-gen-go-vtproto),
# gogopb/ (gogo/protobuf's protoc-gen-gogofaster) and
# msgpgen/types_gen.go (tinylib/msgp). Generator versions are the tool
# lines of wirecompare/go.mod; protoc comes from Debian's protobuf-compiler.
#
#   wirecompare/gen.sh [OUTDIR]   (default: wirecompare/ itself)
#
# OUTDIR gets the same layout (OUTDIR/pb, OUTDIR/gogopb, OUTDIR/msgpgen);
# check-generated.sh regenerates into a temporary OUTDIR and compares.
set -euo pipefail
cd "$(dirname "$0")"
export GOWORK=off
out=$(realpath -m "${1:-.}")
command -v protoc >/dev/null || {
	echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2
	exit 1
}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/" \
	google.golang.org/protobuf/cmd/protoc-gen-go \
	github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto \
	github.com/gogo/protobuf/protoc-gen-gogofaster \
	github.com/tinylib/msgp
mkdir -p "$out/pb" "$out/gogopb" "$out/msgpgen"
PATH="$bin:$PATH" protoc -I proto \
	--go_out="$out/pb" --go_opt=paths=source_relative \
	--go-vtproto_out="$out/pb" --go-vtproto_opt=paths=source_relative \
	--go-vtproto_opt=features=marshal+unmarshal+unmarshal_unsafe+size+pool \
	--go-vtproto_opt=pool=github.com/pcapsync/pcapsync/wirecompare/pb.Batch \
	--go-vtproto_opt=pool=github.com/pcapsync/pcapsync/wirecompare/pb.Record \
	packet.proto
PATH="$bin:$PATH" protoc -I proto \
	--gogofaster_out=paths=source_relative,Mpacket.proto=github.com/pcapsync/pcapsync/wirecompare/gogopb:"$out/gogopb" \
	packet.proto
# protoc-gen-go names the protoc version in a comment; pin it so a
# different protoc does not show up as drift.
sed -i 's|^// \tprotoc  .*|// \tprotoc        (wirecompare/gen.sh)|' "$out/pb/packet.pb.go"
if [ "$out" != "$PWD" ]; then cp msgpgen/types.go "$out/msgpgen/"; fi
(cd "$out/msgpgen" && "$bin/msgp" -file types.go -o types_gen.go -tests=false >/dev/null)
gofmt -w "$out/pb" "$out/gogopb" "$out/msgpgen"
