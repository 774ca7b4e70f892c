#!/usr/bin/env bash
# Runs PouchDB's own HTTP integration suites against a running minicouch
# (or CouchDB), as an external yardstick (not part of CI: the suite's code
# lives in pouchdb/pouchdb). Usage:
#
#   testdata/pouchdb-suite.sh POUCHDB_CHECKOUT http://admin:pass@127.0.0.1:PORT
#   SUITE=find testdata/pouchdb-suite.sh POUCHDB_CHECKOUT http://admin:pass@127.0.0.1:PORT
#
# POUCHDB_CHECKOUT is a source checkout of pouchdb/pouchdb (a release's
# source is the parent of its tag: the tag's own commit holds the built
# packages only); the script runs `npm ci` and `npm run build-node` in it
# when needed. Start the server with a fresh data dir first; the suites
# create and delete many databases.
#
# SUITE=integration (the default) runs the replication-related files of
# tests/integration one by one; SUITE=find runs tests/find as PouchDB's CI
# does (TYPE=find PLUGINS=pouchdb-find ADAPTERS=http), in one mocha run.
set -euo pipefail
dir=${1:?pouchdb checkout}
couch=${2:?couch url with credentials}
suite=${SUITE:-integration}
cd "$dir"
if [ ! -d node_modules ]; then
  PUPPETEER_SKIP_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -f packages/node_modules/pouchdb/lib/index.js ]; then
  npm run build-node
fi
out=$(mktemp -d)
counts() {
  p=$(grep -oE '^  [0-9]+ passing' "$1" | grep -oE '[0-9]+' || echo 0)
  x=$(grep -oE '^  [0-9]+ failing' "$1" | grep -oE '[0-9]+' || echo 0)
  s=$(grep -oE '^  [0-9]+ pending' "$1" | grep -oE '[0-9]+' || echo 0)
}
case $suite in
find)
  # test.aaa-setup.js gives every file its database: the files run
  # together, in one mocha process.
  COUCH_HOST=$couch ADAPTERS=http PLUGINS=pouchdb-find ./node_modules/.bin/mocha --exit \
    --timeout "${TIMEOUT:-5000}" --require=./tests/integration/node.setup.js --reporter=dot \
    'tests/find/*/test.*.js' >"$out/find.out" 2>&1 || true
  counts "$out/find.out"
  # the titles of the failures: file, describe, test
  awk '/^  [0-9]+ failing/{on=1} on && /^  [0-9]+\) /{t=$0; getline a; getline b; print t " " a " " b}' "$out/find.out" |
    sed -E 's/ +/ /g'
  echo "TOTAL find passing=$p failing=$x pending=$s (details in $out/find.out)"
  ;;
integration)
  # Some replication tests expect a server that is down on port 3010.
  node bin/down-server.js 3010 >/dev/null 2>&1 &
  down=$!
  trap 'kill $down 2>/dev/null || true' EXIT
  tp=0; tf=0; ts=0
  for f in basics all_docs bulk_docs bulk_get revs_diff changes replication attachments http; do
    # Suites run per adapter (describe "test.x.js-http"); test.http.js is
    # http only and its describe has no adapter suffix.
    grep='\.js-(http|local-http)'
    [ "$f" = http ] && grep='^test\.http\.js'
    COUCH_HOST=$couch ./node_modules/.bin/mocha --exit --timeout "${TIMEOUT:-5000}" \
      --require=./tests/integration/node.setup.js --reporter=dot \
      --grep="$grep" "tests/integration/test.$f.js" >"$out/$f.out" 2>&1 || true
    counts "$out/$f.out"
    echo "test.$f.js: passing=$p failing=$x pending=$s"
    tp=$((tp + p)); tf=$((tf + x)); ts=$((ts + s))
  done
  echo "TOTAL passing=$tp failing=$tf pending=$ts (details in $out)"
  ;;
*)
  echo "unknown SUITE $suite: integration or find" >&2
  exit 2
  ;;
esac
