#!/usr/bin/env bash
# Vendors the web terminal's front end: xterm.js and its fit addon from npm
# (`npm pack`, no install, no bundler), checked against the integrity hashes
# recorded in webterm/static/vendor/INTEGRITY, into webterm/static/vendor/,
# where go:embed picks them up. Run by `make vendor-xterm`; the result is
# committed, so building virtcon never needs npm or the network.
#
#   scripts/vendor-xterm.sh            fetch, refuse on a hash mismatch, copy
#   scripts/vendor-xterm.sh --update   re-record the hashes (after checking
#                                      them against `npm view ... dist.integrity`)
#
# To move to a new version: change the pin below, run with --update, review
# the diff, commit.
set -euo pipefail

XTERM=@xterm/xterm@6.0.0
FIT=@xterm/addon-fit@0.11.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
vendor=$root/webterm/static/vendor
integrity=$vendor/INTEGRITY
rel=${integrity#"$root"/}

die() { echo "vendor-xterm: $*" >&2; exit 1; }

update=false
case "${1:-}" in
  "") ;;
  --update) update=true ;;
  -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "vendor-xterm: unknown argument ${1@Q} (want --update or nothing)" >&2; exit 2 ;;
esac
(($# <= 1)) || { echo "vendor-xterm: too many arguments" >&2; exit 2; }

command -v npm >/dev/null || die "needs npm (Debian: apt-get install npm)"
command -v node >/dev/null || die "needs node (Debian: apt-get install nodejs)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# sri FILE: the file's Subresource-Integrity sha512, as npm records it.
sri() {
  node -e 'const c = require("crypto"), fs = require("fs");
    process.stdout.write("sha512-" + c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$1"
}

# recorded SPEC: the hash INTEGRITY holds for SPEC, empty when none.
recorded() {
  [ -f "$integrity" ] || return 0
  awk -v spec="$1" '$1 == spec { print $2 }' "$integrity"
}

# fetch SPEC: packs SPEC into $tmp, checks its hash, prints the tarball path.
fetch() {
  local spec=$1 tgz got want
  tgz=$(cd "$tmp" && npm pack --silent --ignore-scripts "$spec" | tail -n 1)
  tgz=$tmp/$tgz
  [ -f "$tgz" ] || die "$spec: npm pack made no tarball"
  got=$(sri "$tgz")
  if $update; then
    want=$(npm view "$spec" dist.integrity)
    [ "$got" = "$want" ] || die "$spec: the tarball's hash $got is not the registry's dist.integrity $want; refusing to record it"
  else
    want=$(recorded "$spec")
    [ -n "$want" ] || die "$spec: no integrity recorded in $rel; run with --update to record it"
    [ "$got" = "$want" ] || die "$spec: the tarball's hash $got does not match $want recorded in $rel; refusing (if the new one is known good: --update)"
  fi
  echo "$spec $got" >>"$tmp/INTEGRITY.new"
  printf '%s\n' "$tgz"
}

# take TGZ MEMBER DEST: copies one regular file out of a checked tarball.
take() {
  local tgz=$1 member=package/$2 dest=$tmp/stage/$3 x=$tmp/x
  rm -rf "$x" && mkdir -p "$x"
  tar -xzf "$tgz" -C "$x" --no-same-owner --no-same-permissions "$member" || die "${tgz##*/}: no $member"
  [ -f "$x/$member" ] && [ ! -L "$x/$member" ] || die "${tgz##*/}: $member is not a regular file"
  [ -s "$x/$member" ] || die "${tgz##*/}: $member is empty"
  install -D -m 0644 "$x/$member" "$dest"
}

xterm_tgz=$(fetch "$XTERM")
fit_tgz=$(fetch "$FIT")

mkdir -p "$tmp/stage"
take "$xterm_tgz" lib/xterm.mjs xterm/xterm.mjs
take "$xterm_tgz" css/xterm.css xterm/xterm.css
take "$xterm_tgz" LICENSE xterm/LICENSE
take "$fit_tgz" lib/addon-fit.mjs addon-fit/addon-fit.mjs
take "$fit_tgz" LICENSE addon-fit/LICENSE

# What the embedded files must hash to: webterm's test checks them, so an
# edit by hand or a half-done copy fails `go test`.
files=(xterm/xterm.mjs xterm/xterm.css xterm/LICENSE addon-fit/addon-fit.mjs addon-fit/LICENSE)
(cd "$tmp/stage" && sha256sum "${files[@]}") >"$tmp/stage/SHA256SUMS"
{
  echo "# npm tarball integrity (dist.integrity) of the vendored packages: <name>@<version> <sha512>."
  echo "# scripts/vendor-xterm.sh refuses a tarball that does not match; --update re-records."
  cat "$tmp/INTEGRITY.new"
} >"$tmp/stage/INTEGRITY"

# Everything is checked and staged: only now replace what is there.
mkdir -p "$vendor"
rm -rf "$vendor/xterm" "$vendor/addon-fit"
cp -R "$tmp/stage/xterm" "$tmp/stage/addon-fit" "$vendor/"
install -m 0644 "$tmp/stage/SHA256SUMS" "$vendor/SHA256SUMS"
install -m 0644 "$tmp/stage/INTEGRITY" "$integrity"

for f in "${files[@]}"; do
  printf '  %8d  %s\n' "$(stat -c %s "$vendor/$f")" "${vendor#"$root"/}/$f"
done
echo "vendor-xterm: $XTERM and $FIT checked against $rel and copied"
