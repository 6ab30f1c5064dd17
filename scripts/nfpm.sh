#!/bin/sh
# Run nfpm (the .deb builder), pinned, built once into build/tools. It is
# fetched from the Go module proxy (no program links it, so it is not in
# go.mod); a fetch is retried, since one DNS hiccup on the way to the
# proxy failed a whole CI run.
set -eu
GO=${GO:-go}
version=v2.45.2
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/build/tools
bin=$tools/nfpm-$version
if [ ! -x "$bin" ]; then
	mkdir -p "$tools/nfpm.tmp"
	n=0
	until GOBIN="$tools/nfpm.tmp" "$GO" install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$version"; do
		n=$((n + 1))
		[ "$n" -lt 4 ] || { echo "nfpm.sh: could not fetch nfpm $version after $n tries" >&2; exit 1; }
		echo "nfpm.sh: fetching nfpm $version failed; retrying in $((n * 5)) s" >&2
		sleep $((n * 5))
	done
	mv "$tools/nfpm.tmp/nfpm" "$bin"
	rmdir "$tools/nfpm.tmp"
fi
exec "$bin" "$@"
