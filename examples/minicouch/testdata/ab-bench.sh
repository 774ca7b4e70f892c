#!/usr/bin/env bash
# Runs one of minicouch's HTTP benchmarks against two builds in turn, so
# that a change's effect stands out from the noise of a shared machine:
# both builds see the same load over time. Usage, from the repository root:
#
#   examples/minicouch/testdata/ab-bench.sh BASE [BENCH] [ROUNDS]
#
# BASE is the git revision to compare the work tree with; BENCH the
# benchmark (default SingleDocPuts), ROUNDS how many before/after pairs
# (default 6). The benchmarks need pouchdb-server (`make interop-deps`).
# Prints one line per run, "before"/"after" first.
set -euo pipefail
base=${1:?git revision to compare with}
bench=${2:-SingleDocPuts}
rounds=${3:-6}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive "$base" | tar -x -C "$work"
(cd "$work" && go build -o "$work/minicouch-before" ./examples/minicouch)
(cd "$root" && go build -o "$work/minicouch-after" ./examples/minicouch &&
  go test -c -o "$work/minicouch.test" ./examples/minicouch)
cd "$root/examples/minicouch"
for ((i = 1; i <= rounds; i++)); do
  for v in before after; do
    printf '%s ' "$v"
    MINICOUCH_BIN="$work/minicouch-$v" "$work/minicouch.test" \
      -test.run '^$' -test.bench "^Benchmark$bench\$" -test.benchtime 1x | grep '^Benchmark'
  done
done
