#!/usr/bin/env bash
# Runs PouchDB's own HTTP integration suites against a running minicouch, as
# an external yardstick (not part of CI: the suite's code lives in
# pouchdb/pouchdb). Usage:
#
#   testdata/pouchdb-suite.sh POUCHDB_CHECKOUT http://admin:pass@127.0.0.1:PORT
#
# POUCHDB_CHECKOUT is a git checkout of pouchdb/pouchdb; the script runs
# `npm ci` and `npm run build-node` in it when needed. Start minicouch with a
# fresh data dir first; the suites create and delete many databases.
set -euo pipefail
dir=${1:?pouchdb checkout}
couch=${2:?couch url with credentials}
cd "$dir"
if [ ! -d node_modules ]; then
  PUPPETEER_SKIP_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -f packages/node_modules/pouchdb/lib/index.js ]; then
  npm run build-node
fi
# Some replication tests expect a server that is down on port 3010.
node bin/down-server.js 3010 >/dev/null 2>&1 &
down=$!
trap 'kill $down 2>/dev/null || true' EXIT
out=$(mktemp -d)
tp=0; tf=0; ts=0
for f in basics all_docs bulk_docs bulk_get revs_diff changes replication attachments; do
  COUCH_HOST=$couch ./node_modules/.bin/mocha --exit --timeout "${TIMEOUT:-5000}" \
    --require=./tests/integration/node.setup.js --reporter=dot \
    --grep='\.js-(http|local-http)' "tests/integration/test.$f.js" >"$out/$f.out" 2>&1 || true
  p=$(grep -oE '[0-9]+ passing' "$out/$f.out" | grep -oE '[0-9]+' || echo 0)
  x=$(grep -oE '[0-9]+ failing' "$out/$f.out" | grep -oE '[0-9]+' || echo 0)
  s=$(grep -oE '[0-9]+ pending' "$out/$f.out" | grep -oE '[0-9]+' || echo 0)
  echo "test.$f.js: passing=$p failing=$x pending=$s"
  tp=$((tp + p)); tf=$((tf + x)); ts=$((ts + s))
done
echo "TOTAL passing=$tp failing=$tf pending=$ts (details in $out)"
