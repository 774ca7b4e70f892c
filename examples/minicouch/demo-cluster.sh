#!/usr/bin/env bash
# make demo-cluster: a 3-member etcd and three minicouch on 127.0.0.1 sharing
# one replication job queue: one api_frontend only (5984), two replication
# only (5985, 5986). Ctrl-C stops everything. See docs/cluster.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
DATA=${DEMO_CLUSTER_DATA:-.demo/cluster}
ETCD=${ETCD_BIN:-$(command -v etcd || true)}
if [ -z "$ETCD" ]; then
  echo "etcd not found: apt-get install etcd-server (or set ETCD_BIN)" >&2
  exit 1
fi
mkdir -p "$DATA"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

initial="e0=http://127.0.0.1:2380,e1=http://127.0.0.1:22380,e2=http://127.0.0.1:32380"
for i in 0 1 2; do
  port=$((i == 0 ? 2379 : i * 10000 + 12379))
  peer=$((port + 1))
  "$ETCD" --name "e$i" --data-dir "$DATA/etcd$i" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$initial" --initial-cluster-token couchepi-demo --log-level error \
    >"$DATA/etcd$i.log" 2>&1 &
  pids+=($!)
done
endpoints=http://127.0.0.1:2379,http://127.0.0.1:22379,http://127.0.0.1:32379

# Every node needs the key the queue's job records are sealed with
# (docs/replicator.md, "Credentials at rest"): one key file for all three.
key="$DATA/replicator.key"
if [ ! -s "$key" ]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$key"; echo >>"$key")
fi
key="$(cd "$(dirname "$key")" && pwd)/$(basename "$key")"

node() { # port api_frontend replication
  local dir="$DATA/node$1"
  mkdir -p "$dir"
  cat >"$dir/cluster.ini" <<INI
[replicator]
job_store = etcd
secret_key_file = $key
[etcd]
endpoints = $endpoints
[node_types]
api_frontend = $2
replication = $3
INI
  "$BIN/minicouch" --addr "127.0.0.1:$1" --data "$dir" --config "$dir/cluster.ini" \
    --admin admin:pass --plugin "$BIN/replicator" >"$dir/minicouch.log" 2>&1 &
  pids+=($!)
}
node 5984 true false
node 5985 false true
node 5986 false true

for port in 5984 5985 5986; do
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$port/_up" >/dev/null 2>&1 && break
    sleep 0.2
  done
done
cat <<MSG
cluster up: etcd $endpoints
  frontend    http://admin:pass@127.0.0.1:5984/   (api_frontend: _replicator docs, _replicate, _scheduler/*)
  replication http://admin:pass@127.0.0.1:5985/ and :5986/   (run the jobs)
logs in $DATA/*/minicouch.log; Ctrl-C stops everything.
MSG
wait
