#!/bin/sh
# fauxton.sh DIR — put the Fauxton build (CouchDB's web UI, npm package
# "fauxton") into DIR, ready for `minicouch --fauxton DIR`. The repository
# never vendors Fauxton. `npm pack` fetches only the 1 MB package tarball:
# installing the package would pull its whole build toolchain (~500 MB).
set -eu
version=1.2.6
dest=${1:?usage: fauxton.sh DIR}
if [ -f "$dest/index.html" ] && [ "$(cat "$dest/.fauxton-version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack "fauxton@$version" --silent >/dev/null)
tar -xzf "$tmp/fauxton-$version.tgz" -C "$tmp" package/dist/release
mkdir -p "$dest"
cp -R "$tmp/package/dist/release/." "$dest/"
echo "$version" > "$dest/.fauxton-version"
echo "fauxton.sh: Fauxton $version in $dest"
