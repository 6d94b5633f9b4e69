#!/usr/bin/env bash
# Fails when the checked-in generated code of wirecompare/ differs from what
# gen.sh makes now (an edited .proto or types.go without regenerating,
# or a hand edit of generated code). For CI; needs protoc.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./gen.sh "$tmp"
status=0
for f in pb/packet.pb.go pb/packet_vtproto.pb.go gogopb/packet.pb.go msgpgen/types_gen.go; do
	if ! diff -u "$f" "$tmp/$f"; then
		echo "check-generated: wirecompare/$f is stale; run wirecompare/gen.sh" >&2
		status=1
	fi
done
extra=$(cd "$tmp" && find pb gogopb msgpgen -name '*.go' | sort)
have=$(find pb gogopb msgpgen -name '*.go' | sort)
if [ "$extra" != "$have" ]; then
	echo "check-generated: generated file set differs:" >&2
	diff <(echo "$have") <(echo "$extra") >&2 || true
	status=1
fi
[ $status -eq 0 ] && echo "wirecompare: generated code is up to date"
exit $status
