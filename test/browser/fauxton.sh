#!/bin/sh
# fauxton.sh DIR — put the Fauxton build (CouchDB's web UI, npm package
# "fauxton" pinned in package.json) into DIR, ready for `minicouch --fauxton DIR`.
# Installs this directory's npm packages first when they are missing
# (`npm ci`, from package-lock.json). The repository never vendors Fauxton.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: fauxton.sh DIR}
dist="$here/node_modules/fauxton/dist/release"
if [ ! -f "$dist/index.html" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -f "$dist/index.html" ]; then
  echo "fauxton.sh: $dist/index.html missing after npm ci" >&2
  exit 1
fi
mkdir -p "$dest"
cp -R "$dist/." "$dest/"
echo "fauxton.sh: Fauxton $(node -p "require('$here/node_modules/fauxton/package.json').version") in $dest"
