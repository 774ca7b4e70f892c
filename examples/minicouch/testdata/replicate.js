// PouchDB interop check for minicouch (run by interop_test.go).
//
// Env: POUCHDB_DIR (node_modules dir holding pouchdb), COUCH_URL
// (http://user:pass@host:port), WORK_DIR (temp dir for the leveldb db).
// Builds a source db on minicouch with conflicts, deletions, _local docs
// and attachments; replicates it into a local (leveldb) PouchDB and from
// there into another minicouch db, one-shot and then live; checks that
// PouchDB's view of docs, conflicts and attachments is identical on all
// three. Exits non-zero with a message on the first difference.
'use strict';
const PouchDB = require(process.env.POUCHDB_DIR + '/pouchdb');
const path = require('path');
const assert = require('assert');

const url = process.env.COUCH_URL;
const work = process.env.WORK_DIR;
const suffix = process.env.DB_SUFFIX || '';

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// snapshot returns PouchDB's view of a db: every doc (with conflicts and
// attachment data) and every leaf of conflicted docs. A local PouchDB
// digests attachment data itself (md5 of the data), where CouchDB and
// minicouch store text gzipped and digest the gzip bytes: its digests are
// left out (noDigests), the data is compared.
async function snapshot(db, noDigests) {
  const all = await db.allDocs({ include_docs: true, conflicts: true, attachments: true, binary: false });
  const out = {};
  for (const row of all.rows) {
    const doc = row.doc;
    const leaves = await db.get(row.id, { open_revs: 'all', attachments: true, revs: true });
    const lv = leaves.map((l) => l.ok).filter(Boolean)
      .map((d) => ({ rev: d._rev, deleted: !!d._deleted, revisions: d._revisions, body: strip(d, noDigests) }))
      .sort((a, b) => (a.rev < b.rev ? -1 : 1));
    out[row.id] = { rev: doc._rev, conflicts: (doc._conflicts || []).slice().sort(), body: strip(doc, noDigests), leaves: lv };
  }
  // deleted docs: visible through changes
  const ch = await db.changes({ style: 'all_docs' });
  const deleted = ch.results.filter((r) => r.deleted).map((r) => r.id).sort();
  return { docs: out, deleted };
}

function strip(d, noDigests) {
  const c = {};
  for (const k of Object.keys(d).sort()) {
    if (k === '_rev' || k === '_conflicts' || k === '_revisions') continue;
    if (k === '_attachments') {
      const atts = {};
      for (const n of Object.keys(d._attachments).sort()) {
        const a = d._attachments[n];
        atts[n] = { content_type: a.content_type, digest: noDigests ? undefined : a.digest, data: a.data };
      }
      c[k] = atts;
      continue;
    }
    c[k] = d[k];
  }
  return c;
}

async function build(src) {
  await src.bulkDocs([
    { _id: 'plain1', n: 1, type: 'odd' },
    { _id: 'plain2', n: 2, type: 'even', nested: { a: [1, 2, { b: 'ü' }] } },
    { _id: 'todelete', n: 3 },
    { _id: 'withatt', n: 4, _attachments: {
      'hello.txt': { content_type: 'text/plain', data: Buffer.from('hello world').toString('base64') },
      'bin.dat': { content_type: 'application/octet-stream', data: Buffer.from([0, 1, 2, 255, 254, 10, 13]).toString('base64') },
    } },
    { _id: '_design/app', filters: { odd: 'function(doc) { return doc.type === "odd"; }' } },
  ]);
  const del = await src.get('todelete');
  await src.remove(del);
  // conflicts: two branches of the same doc written with new_edits=false
  await src.bulkDocs([
    { _id: 'conflicted', _rev: '1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', v: 'root' },
  ], { new_edits: false });
  await src.bulkDocs([
    { _id: 'conflicted', _rev: '2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', v: 'b',
      _revisions: { start: 2, ids: ['bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'] } },
    { _id: 'conflicted', _rev: '2-cccccccccccccccccccccccccccccccc', v: 'c',
      _revisions: { start: 2, ids: ['cccccccccccccccccccccccccccccccc', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'] } },
    { _id: 'conflicted', _rev: '3-dddddddddddddddddddddddddddddddd', _deleted: true,
      _revisions: { start: 3, ids: ['dddddddddddddddddddddddddddddddd', 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'] } },
  ], { new_edits: false });
  // an attachment added by the attachment endpoint, then updated doc keeps it as stub
  const w = await src.get('withatt');
  const r = await src.putAttachment('withatt', 'third.json', w._rev, Buffer.from('{"x":1}'), 'application/json');
  const w2 = await src.get('withatt');
  w2.n = 40;
  await src.put(w2);
  // _local docs: stored on the server, never replicated
  await src.put({ _id: '_local/mine', secret: 'stay here' });
  return r;
}

function same(a, b, what) {
  try {
    assert.deepStrictEqual(a, b);
  } catch (e) {
    console.error('MISMATCH ' + what + '\n' + JSON.stringify(a, null, 1) + '\n---\n' + JSON.stringify(b, null, 1));
    throw new Error('mismatch: ' + what);
  }
}

async function waitFor(fn, what) {
  for (let i = 0; i < 200; i++) {
    if (await fn()) return;
    await sleep(100);
  }
  throw new Error('timeout waiting for ' + what);
}

async function main() {
  const src = new PouchDB(url + '/src' + suffix);
  const dst = new PouchDB(url + '/dst' + suffix);
  const local = new PouchDB(path.join(work, 'local' + suffix));
  await src.info(); // creates the db
  await build(src);

  // one-shot: minicouch -> local PouchDB -> another minicouch db
  const r1 = await PouchDB.replicate(src, local);
  if (!r1.ok || r1.docs_written < 5) throw new Error('replicate src->local: ' + JSON.stringify(r1));
  const r2 = await PouchDB.replicate(local, dst);
  if (!r2.ok) throw new Error('replicate local->dst: ' + JSON.stringify(r2));
  const s1 = await snapshot(src), l1 = await snapshot(local, true), d1 = await snapshot(dst);
  same(await snapshot(src, true), l1, 'one-shot src vs local');
  same(s1, d1, 'one-shot src vs dst');
  if (!s1.docs.conflicted || s1.docs.conflicted.conflicts.length !== 1) throw new Error('expected one conflict: ' + JSON.stringify(s1.docs.conflicted));
  if (s1.deleted.indexOf('todelete') < 0) throw new Error('deletion missing');
  const mine = await src.get('_local/mine');
  if (mine.secret !== 'stay here') throw new Error('_local doc lost');
  for (const db of [dst, local]) {
    try { await db.get('_local/mine'); throw new Error('_local doc was replicated'); } catch (e) { if (e.status !== 404) throw e; }
  }
  // a second one-shot run resumes from the checkpoint and writes nothing
  const r3 = await PouchDB.replicate(src, local);
  if (r3.docs_written !== 0) throw new Error('second run wrote docs: ' + JSON.stringify(r3));

  // live: changes on minicouch flow through the local db into dst
  const live1 = PouchDB.replicate(src, local, { live: true, retry: true });
  const live2 = PouchDB.replicate(local, dst, { live: true, retry: true });
  const p = await src.get('plain1');
  p.n = 100;
  await src.put(p);
  const p2 = await src.get('plain2');
  await src.remove(p2);
  await src.put({ _id: 'livenew', _attachments: { 'a.txt': { content_type: 'text/plain', data: Buffer.from('live!').toString('base64') } } });
  await src.bulkDocs([{ _id: 'conflicted', _rev: '3-ffffffffffffffffffffffffffffffff', v: 'f',
    _revisions: { start: 3, ids: ['ffffffffffffffffffffffffffffffff', 'cccccccccccccccccccccccccccccccc', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'] } }], { new_edits: false });
  const want = await snapshot(src);
  await waitFor(async () => {
    try { assert.deepStrictEqual(await snapshot(dst), want); return true; } catch (e) { return false; }
  }, 'live replication to reach dst');
  same(await snapshot(local, true), await snapshot(src, true), 'live src vs local');
  live1.cancel();
  live2.cancel();
  await local.close();
  console.log(JSON.stringify({ ok: true, docs: Object.keys(want.docs).length, deleted: want.deleted.length,
    conflicts: want.docs.conflicted.conflicts.length }));
}

main().catch((e) => { console.error('FAIL', e && (e.stack || e)); process.exit(1); });
