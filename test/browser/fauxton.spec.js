// End-to-end test of Fauxton's replication UI against a running server,
// driven by playwright-core on the system chromium (no browser download).
//
//   COUCH_URL=http://127.0.0.1:5984 COUCH_USER=admin COUCH_PASS=pass \
//   SOURCE_DB=fauxton-src ARTIFACTS=artifacts/browser node fauxton.spec.js
//
// SOURCE_DB must exist with some docs (the Go driver seeds it). Every step
// saves a screenshot under ARTIFACTS; every HTTP request the page makes is
// logged to ARTIFACTS/requests.json and the ones answered >= 400 (or that
// failed at the network level) to ARTIFACTS/failed-requests.json with their
// bodies. Steps run on after a failure where they can, so one run shows every
// broken part; the exit code is 1 if any step failed.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const COUCH = (process.env.COUCH_URL || 'http://127.0.0.1:5984').replace(/\/+$/, '');
const USER = process.env.COUCH_USER || 'admin';
const PASS = process.env.COUCH_PASS || 'pass';
const SOURCE = process.env.SOURCE_DB || 'fauxton-src';
const ARTIFACTS = path.resolve(process.env.ARTIFACTS || 'artifacts/browser');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = Number(process.env.STEP_TIMEOUT_MS || 30000);

const ONESHOT_ID = 'fauxton-oneshot';
const CONTINUOUS_ID = 'fauxton-continuous';
const ONESHOT_TARGET = 'fauxton-oneshot-target';
const CONTINUOUS_TARGET = 'fauxton-continuous-target';
const TRANSIENT_TARGET = 'fauxton-transient-target';

const basic = 'Basic ' + Buffer.from(USER + ':' + PASS).toString('base64');

// couch sends one request to the server as the admin, outside the browser.
async function couch(method, p, body) {
  const res = await fetch(COUCH + p, {
    method,
    headers: { Authorization: basic, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch (e) { json = text; }
  return { status: res.status, body: json };
}

async function waitFor(what, fn, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise(r => setTimeout(r, 500));
  }
  throw new Error(`timed out waiting for ${what}` + (last instanceof Error ? `: ${last.message}` : ''));
}

const results = [];
const requests = [];
const failed = [];
let shot = 0;

async function screenshot(page, name) {
  shot++;
  const file = path.join(ARTIFACTS, `${String(shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true }).catch(() => {});
  return file;
}

// step runs one named part of the test, screenshots its end state, and records the outcome.
async function step(page, name, fn) {
  const started = Date.now();
  try {
    await fn();
    await screenshot(page, name);
    results.push({ step: name, ok: true, ms: Date.now() - started });
    console.log(`ok   ${name} (${Date.now() - started} ms)`);
    return true;
  } catch (e) {
    await screenshot(page, name + '-FAILED');
    results.push({ step: name, ok: false, ms: Date.now() - started, error: String(e && e.message || e) });
    console.log(`FAIL ${name}: ${e && e.message || e}`);
    return false;
  }
}

function redact(s) {
  return String(s).replace(/(Basic )[A-Za-z0-9+/=]+/g, '$1****').replace(/(\/\/[^:/@]+:)[^@/]+@/g, '$1*****@');
}

function watchNetwork(page) {
  page.on('response', async res => {
    const req = res.request();
    const url = new URL(req.url());
    if (url.origin !== new URL(COUCH).origin || url.pathname.startsWith('/_utils/')) return;
    const entry = { method: req.method(), path: url.pathname + url.search, status: res.status() };
    requests.push(entry);
    if (res.status() >= 400) {
      let body = '';
      try { body = (await res.text()).slice(0, 2000); } catch (e) { body = `(body unavailable: ${e.message})`; }
      const post = req.postData();
      failed.push({ ...entry, body: redact(body), request_body: post ? redact(post).slice(0, 2000) : undefined });
    }
  });
  page.on('requestfailed', req => {
    const url = new URL(req.url());
    if (url.origin !== new URL(COUCH).origin) return;
    // A request the browser dropped because the test navigated away
    // (waitForRowState reloads the page) is no failure of the server.
    if (req.failure() && req.failure().errorText === 'net::ERR_ABORTED') return;
    failed.push({ method: req.method(), path: url.pathname + url.search, status: 0,
      body: 'network failure: ' + (req.failure() && req.failure().errorText) });
  });
  page.on('pageerror', err => console.log('page error:', err.message));
}

// fillReplicationForm fills the New Replication form: local source, local
// target (new or existing), basic auth on both, type, and doc id.
async function fillReplicationForm(page, { target, newTarget, continuous, docId }) {
  await page.goto(COUCH + '/_utils/#/replication/_create');
  await page.waitForSelector('button#replicate', { timeout: TIMEOUT });
  await page.selectOption('select#replication-source', 'REPLICATION_SOURCE_LOCAL');
  const srcInput = page.locator('.replication__input-react-select .Select-input input').first();
  await srcInput.fill(SOURCE);
  await srcInput.press('Enter');
  await page.selectOption('#select-replication-source-auth', 'BASIC_AUTH');
  await page.fill('#replication-source-auth-username', USER);
  await page.fill('#replication-source-auth-password', PASS);

  const targetValue = newTarget ? 'REPLICATION_TARGET_NEW_LOCAL_DATABASE' : 'REPLICATION_TARGET_EXISTING_LOCAL_DATABASE';
  await page.selectOption('div#replication-target select', targetValue);
  if (newTarget) {
    await page.fill('.replication__new-input', target);
  } else {
    const tgtInput = page.locator('#replication-target-local .Select-input input');
    await tgtInput.fill(target);
    await tgtInput.press('Enter');
  }
  await page.selectOption('#select-replication-target-auth', 'BASIC_AUTH');
  await page.fill('#replication-target-auth-username', USER);
  await page.fill('#replication-target-auth-password', PASS);

  await page.selectOption('select:has(option[value="REPLICATION_TYPE_CONTINUOUS"])',
    continuous ? 'REPLICATION_TYPE_CONTINUOUS' : 'REPLICATION_TYPE_ONE_TIME');
  await page.fill('.replication__doc-name-input', docId);
}

// rowState is the state class of the activity row whose doc link is docId ("" if absent).
async function rowState(page, docId) {
  const row = page.locator('tr.replication__table-row', { has: page.locator(`a[href="#/database/_replicator/${encodeURIComponent(docId)}"]`) });
  if (await row.count() === 0) return '';
  const cls = await row.first().locator('td.replication__row-status').getAttribute('class');
  const m = /replication__row-status--(\S+)/.exec(cls || '');
  return m ? m[1] : '?';
}

async function waitForRowState(page, docId, want) {
  let seen = '';
  await waitFor(`replication ${docId} to show "${want}" in Replicator DB Activity`, async () => {
    // A hash change to the same route does not refetch: reload the page.
    await page.goto(COUCH + '/_utils/#/replication');
    await page.reload();
    await page.waitForSelector('.replication__filter', { timeout: TIMEOUT }).catch(() => {});
    await page.waitForTimeout(1000);
    seen = await rowState(page, docId);
    if (seen !== want) throw new Error(`state is "${seen}"`);
    return true;
  }, 90000);
}

async function docCount(db) {
  const r = await couch('GET', '/' + encodeURIComponent(db));
  return r.status === 200 ? r.body.doc_count : -1;
}

async function main() {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fauxton-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 900 },
  });
  const page = context.pages()[0] || await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  watchNetwork(page);
  const sourceDocs = await docCount(SOURCE);

  await step(page, 'login', async () => {
    await page.goto(COUCH + '/_utils/#/login');
    await page.waitForSelector('#username');
    await page.fill('#username', USER);
    await page.fill('#password', PASS);
    await page.click('#submit');
    await waitFor('leaving the login page', async () => !page.url().includes('login'));
    await page.waitForSelector('text=Log Out');
    const cookies = await context.cookies(COUCH);
    if (!cookies.some(c => c.name === 'AuthSession')) throw new Error('no AuthSession cookie after login');
  });

  await step(page, 'databases-list', async () => {
    await page.goto(COUCH + '/_utils/#/_all_dbs');
    await page.locator('a', { hasText: SOURCE }).first().waitFor();
  });

  await step(page, 'oneshot-form', async () => {
    await fillReplicationForm(page, { target: ONESHOT_TARGET, newTarget: true, continuous: false, docId: ONESHOT_ID });
  });
  await step(page, 'oneshot-submitted', async () => {
    await page.click('button#replicate');
    await waitFor('the _replicator doc of the one-shot replication', async () => {
      const r = await couch('GET', '/_replicator/' + ONESHOT_ID);
      return r.status === 200;
    });
  });
  await step(page, 'oneshot-completed', async () => {
    await waitForRowState(page, ONESHOT_ID, 'completed');
  });
  await step(page, 'oneshot-docs-arrived', async () => {
    await waitFor(`${sourceDocs} docs in ${ONESHOT_TARGET}`, async () => (await docCount(ONESHOT_TARGET)) === sourceDocs);
    await page.goto(COUCH + `/_utils/#/database/${ONESHOT_TARGET}/_all_docs`);
    await page.waitForSelector('text=doc000', { timeout: TIMEOUT });
  });

  await couch('PUT', '/' + CONTINUOUS_TARGET);
  await step(page, 'continuous-form', async () => {
    await fillReplicationForm(page, { target: CONTINUOUS_TARGET, newTarget: false, continuous: true, docId: CONTINUOUS_ID });
  });
  await step(page, 'continuous-submitted', async () => {
    await page.click('button#replicate');
    await waitFor('the _replicator doc of the continuous replication', async () => {
      const r = await couch('GET', '/_replicator/' + CONTINUOUS_ID);
      return r.status === 200;
    });
  });
  await step(page, 'continuous-row-before-reload', async () => {
    // Fauxton shows the activity page after "Start Replication"; the new
    // row must show a state and a start time without a reload (issue 14).
    let seen = '';
    await waitFor(`replication ${CONTINUOUS_ID} listed with a state before any reload`, async () => {
      if (!page.url().includes('#/replication')) throw new Error(`still at ${page.url()}`);
      seen = await rowState(page, CONTINUOUS_ID);
      if (seen === '' || seen === '?') throw new Error(`state is "${seen}"`);
      const row = page.locator('tr.replication__table-row', { has: page.locator(`a[href="#/database/_replicator/${CONTINUOUS_ID}"]`) });
      const started = (await row.first().locator('td').nth(3).innerText()).trim();
      if (!/\d/.test(started)) throw new Error(`start time is "${started}"`);
      return true;
    }, 15000);
  });
  await step(page, 'continuous-running', async () => {
    await waitForRowState(page, CONTINUOUS_ID, 'running');
  });
  await step(page, 'continuous-new-doc-arrives', async () => {
    await couch('PUT', `/${SOURCE}/arrived-later`, { note: 'written after the continuous replication started' });
    await waitFor('arrived-later in the continuous target', async () =>
      (await couch('GET', `/${CONTINUOUS_TARGET}/arrived-later`)).status === 200);
    await page.goto(COUCH + `/_utils/#/database/${CONTINUOUS_TARGET}/_all_docs`);
    await page.waitForSelector('text=arrived-later');
  });

  await step(page, 'continuous-parked-shows-running', async () => {
    // Quiet for idle_park_sec, the job is parked: to its user it is
    // replicating, and Fauxton must say "running", not "pending".
    await waitFor(`replication ${CONTINUOUS_ID} parked`, async () => {
      const r = await couch('GET', '/_scheduler/docs/_replicator/' + encodeURIComponent(CONTINUOUS_ID));
      return r.status === 200 && r.body.info && r.body.info.parked_since !== undefined;
    }, 60000);
    await waitForRowState(page, CONTINUOUS_ID, 'running');
  });

  await step(page, 'edit-with-conflict-overwrite', async () => {
    await page.goto(COUCH + '/_utils/#replication/id/' + encodeURIComponent(CONTINUOUS_ID));
    await page.waitForSelector('.replication__doc-name-input');
    await waitFor('the form filled from the doc', async () =>
      (await page.inputValue('.replication__doc-name-input')) === CONTINUOUS_ID);
    for (const side of ['source', 'target']) {
      if (await page.locator(`#replication-${side}-auth-password`).count()) {
        await page.fill(`#replication-${side}-auth-username`, USER);
        await page.fill(`#replication-${side}-auth-password`, PASS);
      }
    }
    const before = (await couch('GET', '/_replicator/' + CONTINUOUS_ID)).body._rev;
    await page.click('button#replicate');
    await page.waitForSelector('.replication__error-continue');
    await page.waitForTimeout(500); // let the modal finish fading in
    await screenshot(page, 'conflict-modal');
    await page.click('.replication__error-continue');
    await waitFor('the overwritten _replicator doc', async () => {
      const r = await couch('GET', '/_replicator/' + CONTINUOUS_ID);
      return r.status === 200 && r.body._rev !== before;
    });
  });

  await step(page, 'replicate-job-listed', async () => {
    const r = await couch('POST', '/_replicate', {
      source: { url: `${COUCH}/${SOURCE}`, headers: { Authorization: basic } },
      target: { url: `${COUCH}/${TRANSIENT_TARGET}`, headers: { Authorization: basic } },
      create_target: true, continuous: true,
    });
    if (r.status !== 202 && r.status !== 200) throw new Error(`POST /_replicate: ${r.status} ${JSON.stringify(r.body)}`);
    await waitFor('the _replicate job in "_replicate Activity"', async () => {
      await page.goto(COUCH + '/_utils/#/replication/_replicate');
      await page.reload();
      await page.waitForTimeout(1000);
      return (await page.locator('tr.replication__table-row').count()) > 0;
    });
  });
  await step(page, 'replicate-job-cancelled', async () => {
    await page.locator('tr.replication__table-row .replication__row-btn.icon-trash').first().click();
    await page.locator('.replication_delete-doc-modal button', { hasText: 'Delete Replication Job' }).click();
    await waitFor('no _replicate job left in /_scheduler/jobs', async () => {
      const r = await couch('GET', '/_scheduler/jobs');
      return r.status === 200 && !r.body.jobs.some(j => !j.doc_id);
    });
    await page.goto(COUCH + '/_utils/#/replication/_replicate');
    await page.waitForTimeout(1000);
  });

  await step(page, 'replication-deleted', async () => {
    await page.goto(COUCH + '/_utils/#/replication');
    const row = page.locator('tr.replication__table-row', { has: page.locator(`a[href="#/database/_replicator/${ONESHOT_ID}"]`) });
    await row.locator('.replication__row-btn.icon-trash').click();
    await page.locator('.replication_delete-doc-modal button', { hasText: 'Delete Document' }).click();
    await waitFor(`_replicator/${ONESHOT_ID} deleted`, async () =>
      (await couch('GET', '/_replicator/' + ONESHOT_ID)).status === 404);
    await page.goto(COUCH + '/_utils/#/replication');
    await page.waitForTimeout(1000);
  });

  await step(page, 'active-tasks', async () => {
    await page.goto(COUCH + '/_utils/#/activetasks');
    await page.locator('td', { hasText: CONTINUOUS_TARGET }).first().waitFor();
  });
  await step(page, 'config', async () => {
    await page.goto(COUCH + '/_utils/#/_config');
    await page.waitForSelector('text=chttpd_auth', { timeout: TIMEOUT });
  });
  await step(page, 'double-slash-request', async () => {
    const r = await page.evaluate(async url => (await fetch(url, { credentials: 'include' })).status, COUCH + '//_all_dbs');
    if (r !== 200) throw new Error(`GET //_all_dbs answered ${r}`);
  });

  await context.close();
  // What the server said about the replications at the end, for the report.
  const state = {};
  for (const p of ['/_scheduler/jobs', '/_scheduler/docs', '/_active_tasks', '/_replicator/_all_docs?include_docs=true']) {
    state[p] = await couch('GET', p).catch(e => ({ error: String(e) }));
  }
  fs.writeFileSync(path.join(ARTIFACTS, 'server-state.json'), redact(JSON.stringify(state, null, 1)));
  fs.writeFileSync(path.join(ARTIFACTS, 'requests.json'), JSON.stringify(requests, null, 1));
  fs.writeFileSync(path.join(ARTIFACTS, 'failed-requests.json'), JSON.stringify(failed, null, 1));
  fs.writeFileSync(path.join(ARTIFACTS, 'results.json'), JSON.stringify(results, null, 1));
  const bad = results.filter(r => !r.ok);
  // The form checks that a new replication's doc id is free: those 404s are expected.
  const expected = new Set([ONESHOT_ID, CONTINUOUS_ID].map(id => `GET /_replicator/${id} 404`));
  const unexpected = failed.filter(f => !expected.has(`${f.method} ${f.path} ${f.status}`));
  console.log(`${results.length - bad.length}/${results.length} steps passed; ${failed.length} requests answered >= 400, ` +
    `${unexpected.length} unexpected (see ${ARTIFACTS}/failed-requests.json)`);
  for (const f of unexpected) console.log(`unexpected: ${f.method} ${f.path} -> ${f.status} ${f.body}`);
  process.exit(bad.length || unexpected.length ? 1 : 0);
}

main().catch(e => {
  console.error('fauxton.spec.js:', e);
  process.exit(2);
});
