#!/bin/sh
# Regenerate the director API's Go code from api/virtcon/**/*.proto into
# OUTDIR (the repository root for `make proto`; a temporary directory for
# the staleness test). The plugins are go.mod tools, so their versions are
# the ones the code links; protoc is Debian's protobuf-compiler.
set -eu
out=${1:?usage: proto.sh OUTDIR}
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
tools=${PROTO_TOOLS:-$root/build/tools}
mkdir -p "$tools" "$out"
cd "$root"
GOBIN=$tools "$GO" install tool
command -v protoc >/dev/null || { echo "proto.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
protoc -I api \
	--plugin=protoc-gen-go="$tools/protoc-gen-go" \
	--plugin=protoc-gen-connect-go="$tools/protoc-gen-connect-go" \
	--go_out="$out" --go_opt=module=github.com/virtcon/virtcon \
	--connect-go_out="$out" --connect-go_opt=module=github.com/virtcon/virtcon \
	api/virtcon/director/v1/*.proto
