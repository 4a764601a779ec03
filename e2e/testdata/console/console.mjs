// The browser side of e2e TestConsole: drives the approval console (the
// api's /ui/) in Chromium through playwright-core. Two phases (PHASE):
//
//   main  sign-in, live inbox, an approval's page (CSV table, change since
//         the last accepted output, marked value, steps, secrets), axe-core,
//         phone width, keyboard, two approvers at once, a read-only token,
//         forged POSTs, and a hostile run's output rendered as text only.
//   bulk  with thousands of approvals pending: time until the inbox's first
//         row is visible, 50 rows a page, the next page.
//
// Environment: AIRLOCK_API_URL, AIRLOCK_QUEUE, AGENT_TOKEN, ALICE_TOKEN,
// CAROL_TOKEN, READER_TOKEN, AXE_PATH, PLAYWRIGHT_DIR, CHROMIUM, DEBUG_DIR
// (screenshots and page text on failure), AIRLOCK_CONSOLE_SHOTS (when set:
// console-inbox.png and console-approval.png are written there).
//
// The last line of stdout is one JSON object: {"ok": true, ...findings} or
// {"ok": false, "error": "..."} (then the exit status is 1).

import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';

const env = process.env;
const BASE = (env.AIRLOCK_API_URL || '').replace(/\/+$/, '');
const ORIGIN = BASE ? new URL(BASE).origin : '';
const QUEUE = env.AIRLOCK_QUEUE || '';
const PHASE = process.argv[2] || env.PHASE || 'main';
const AXE = env.AXE_PATH || '/opt/airlock-browser/node_modules/axe-core/axe.min.js';
const SHOTS = env.AIRLOCK_CONSOLE_SHOTS || '';
const DEBUG = env.DEBUG_DIR || '';
const require = createRequire(path.join(env.PLAYWRIGHT_DIR || '/opt/airlock-browser', 'package.json'));
const { chromium } = require('playwright-core');

const log = (...a) => console.error('[console]', ...a);
let stepName = 'start';
const pages = new Map();   // name -> page, for the failure report
const pageErrors = [];     // uncaught errors of the console's own pages
const consoleErrors = [];  // console.error lines of every page (Chromium logs refused scripts there)

function step(name) { stepName = name; log(name); }
class Failure extends Error {}
function check(cond, msg) { if (!cond) throw new Failure(msg); }

// HTTP API from node (the agent's side).
async function apiCall(method, p, token, body) {
  const res = await fetch(BASE + p, {
    method, headers: {Authorization: 'Bearer ' + token, ...(body ? {'Content-Type': 'application/json'} : {})},
    body: body ? JSON.stringify(body) : undefined, signal: AbortSignal.timeout(45000),
  });
  const text = await res.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { /* left null */ }
  return {status: res.status, data, text};
}

// enqueue POSTs a run and waits (30 s at most) until it is parked.
async function enqueueParked(p, body, what) {
  const en = await apiCall('POST', p, env.AGENT_TOKEN, {...body, queue: QUEUE});
  check(en.status === 201 && en.data && en.data.task_id, `${what}: POST ${p}: ${en.status} ${en.text}`);
  return en.data.task_id;
}
async function waitParked(taskID, what) {
  const r = await apiCall('GET', `/v1/runs/${encodeURIComponent(taskID)}?wait=30s&queue=${encodeURIComponent(QUEUE)}`, env.AGENT_TOKEN);
  check(r.status === 200 && r.data && r.data.state === 'parked' && r.data.approval_id,
    `${what}: want parked within 30 s, got ${r.status} ${r.text.slice(0, 2000)}`);
  return r.data.approval_id;
}

// newPage opens a page in a new context; it records the page's uncaught
// errors and CSP violations (an init script runs whatever the page's CSP).
async function newPage(browser, name, opts = {}) {
  const context = await browser.newContext({viewport: {width: 1280, height: 800}, locale: 'en-US', acceptDownloads: true, ...opts});
  await context.addInitScript(() => {
    window.__violations = [];
    document.addEventListener('securitypolicyviolation', e => {
      window.__violations.push({directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample, source: e.sourceFile, line: e.lineNumber});
    }, true);
  });
  const page = await context.newPage();
  page.setDefaultTimeout(5000);
  page.setDefaultNavigationTimeout(10000);
  page.on('pageerror', e => pageErrors.push(`${name}: ${e.message}`));
  page.on('console', m => { if (m.type() === 'error') consoleErrors.push(`${name}: ${m.text()}`); });
  pages.set(name, page);
  return {context, page};
}

const bodyText = page => page.evaluate(() => document.body.innerText);
async function waitText(page, re, timeout = 5000) {
  try {
    await page.waitForFunction(src => new RegExp(src[0], src[1]).test(document.body.innerText), [re.source, re.flags], {timeout});
  } catch (e) {
    throw new Failure(`text ${re} did not show within ${timeout} ms`);
  }
}

async function signIn(page, token, name) {
  await page.goto(BASE + '/ui/');
  const field = page.locator('input[type=password]');
  await field.waitFor({state: 'visible'});
  await field.pressSequentially(token, {delay: 0});
  await field.press('Enter');
  await waitText(page, new RegExp('Signed in as ' + name));
}

async function axe(page, what) {
  // axe-core is evaluated in the page, not added as a <script>: the
  // console's CSP (script-src 'self') refuses an inline script tag.
  if (!await page.evaluate(() => typeof window.axe === 'object')) {
    await page.evaluate(fs.readFileSync(AXE, 'utf8'));
  }
  const res = await page.evaluate(() => window.axe.run(document, {resultTypes: ['violations']}));
  check(res.testEngine && res.testEngine.name === 'axe-core' && res.passes.length > 10, `axe-core on ${what} did not run its rules: ${JSON.stringify(res.testEngine)}, ${res.passes.length} passed`);
  const bad = res.violations.filter(v => v.impact === 'serious' || v.impact === 'critical');
  check(!bad.length, `axe-core on ${what}: ${bad.length} serious or critical violations:\n` + bad.map(v =>
    `- ${v.id} (${v.impact}): ${v.help}\n` + v.nodes.slice(0, 5).map(n => `    ${n.target.join(' ')}: ${n.html.slice(0, 200)}\n      ${(n.failureSummary || '').replace(/\n/g, ' ')}`).join('\n')).join('\n'));
  return res.violations.map(v => `${v.id}:${v.impact}`);
}

async function shot(page, name, opts) {
  if (!SHOTS) return;
  await page.screenshot({path: path.join(SHOTS, name), ...opts});
}

// scrollWidth of the page at a phone's 360 px, and at 640 px (a
// 1280 px window at 200% zoom).
async function phoneWidth(page) {
  const widths = [];
  for (const width of [360, 640]) {
    await page.setViewportSize({width, height: 740});
    await page.waitForTimeout(100);
    widths.push(await page.evaluate(() => document.documentElement.scrollWidth));
  }
  await page.setViewportSize({width: 1280, height: 800});
  return widths;
}

// A small PNG (red square), written by the hostile run as an artifact.
function png(size) {
  const crcTable = Array.from({length: 256}, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = buf => { let c = 0xffffffff; for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4); len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const c = Buffer.alloc(4); c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(size, 0); ihdr.writeUInt32BE(size, 4); ihdr[8] = 8; ihdr[9] = 2;
  const raw = Buffer.alloc(size * (1 + 3 * size));
  for (let y = 0; y < size; y++) for (let x = 0; x < size; x++) raw[y * (1 + 3 * size) + 1 + 3 * x] = 200;
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

// The hostile run: a free-form spec whose result and artifacts try every
// way into the approver's page.
function hostileSpec() {
  const result = {
    title: '<script>window.__pwned=1;alert(1)</script>',
    picture: '<img src=x onerror="window.__pwned=2;alert(2)">',
    homepage: 'javascript:alert(3)',
    note: '<a href="javascript:alert(4)">click</a>',
    beacon: 'http://127.0.0.2:9/result-url',
    '<img src=x onerror=alert(8)>': {'<b>nested</b>': '<svg onload="window.__pwned=3;alert(9)"></svg>', list: ['<iframe src="http://127.0.0.2:9/frame"></iframe>']},
  };
  const octal = buf => [...buf].map(b => '\\' + b.toString(8).padStart(3, '0')).join('');
  const script = [
    'set -eu',
    "cat > out/result.json <<'EOF'", JSON.stringify(result, null, 1), 'EOF',
    "cat > out/evil.html <<'EOF'", '<script>alert(5)</script><img src="http://127.0.0.2:9/beacon">', 'EOF',
    "cat > out/evil.svg <<'EOF'",
    '<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=4;alert(6)"><script>alert(6)</script><image href="http://127.0.0.2:9/svg-beacon"/></svg>', 'EOF',
    "cat > out/report.csv <<'EOF'", 'link,amount', '"=HYPERLINK(""http://127.0.0.2:9/x"",""click"")",10', '<script>alert(7)</script>,20', 'EOF',
    `printf '${octal(png(24))}' > out/pixel.png`,
  ].join('\n') + '\n';
  return {
    version: 1,
    files: {'make.sh': script},
    steps: [{name: 'make', run: ['sh', 'make.sh']}],
    output: {result: 'out/result.json', artifacts: ['out/*']},
  };
}

async function mainPhase(browser) {
  const out = {};

  step('alice signs in');
  const A = await newPage(browser, 'alice');
  await signIn(A.page, env.ALICE_TOKEN, 'alice');
  await A.page.locator('#inbox-count').waitFor();
  await waitText(A.page, /\bLive\b/, 8000);   // the event stream is open

  step('run 2 parks while the inbox is open');
  await A.page.evaluate(() => { window.__sameDocument = 1; });
  const run2 = await enqueueParked('/v1/actions/csv-report/runs', {params: {day: '2026-12-05'}}, 'run 2');
  const ap2 = await waitParked(run2, 'run 2');
  out.run2 = {task_id: run2, approval_id: ap2};
  const linkSel = `a[href="/ui/approvals/${ap2}"]`;
  const link = A.page.locator('table.inbox ' + linkSel);
  try { await link.waitFor({state: 'visible', timeout: 10000}); } catch (e) {
    throw new Failure(`run 2's approval ${ap2} did not show in the open inbox within 10 s (no reload)`);
  }
  check(await A.page.evaluate(() => window.__sameDocument === 1), 'the inbox reloaded: want the new approval to show live');
  const linkText = (await link.innerText()).trim();
  check(linkText.startsWith('ap-') && linkText === ap2, `the inbox's link reads ${JSON.stringify(linkText)}, want ${ap2}`);
  const row = await A.page.locator('table.inbox tbody tr', {has: A.page.locator(linkSel)}).evaluate(tr =>
    Object.fromEntries([...tr.querySelectorAll('td')].map(td => [td.dataset.label || td.cellIndex, td.innerText.trim()])));
  check(row.Queue === QUEUE && row.Action === 'csv-report' && row.Principal === 'agent' && /refund-rate-watch/.test(row.Reasons || ''),
    `the inbox row of ${ap2}: ${JSON.stringify(row)}; want queue ${QUEUE}, action csv-report, principal agent, a reason naming refund-rate-watch`);

  step('axe-core on the inbox');
  out.axe_inbox = await axe(A.page, 'the inbox');
  await shot(A.page, 'console-inbox.png', {fullPage: true});

  // The hostile run parks meanwhile (it is the read-only token's pending
  // approval below, then the hostile page's).
  const hostileTask = await enqueueParked('/v1/runs', hostileSpec(), 'the hostile run');

  step('run 2\'s page');
  await link.click();
  await A.page.waitForURL(`**/ui/approvals/${ap2}`);
  await A.page.locator('#sec-artifacts table.csv').waitFor();
  const csv = await A.page.locator('#sec-artifacts table.csv').evaluate(t => ({
    body: t.tBodies[0].rows.length, head: t.tHead ? t.tHead.rows.length : 0,
    th: [...t.querySelectorAll('thead th')].map(th => th.innerText.trim()), caption: t.caption ? t.caption.innerText : '',
  }));
  check(csv.body === 120 && csv.head === 1 && csv.th.join(',') === 'order_id,customer,amount,status',
    `the CSV preview: ${JSON.stringify(csv)}; want a header row order_id,customer,amount,status and 120 rows`);
  check(/\b120 rows\b/.test(await bodyText(A.page)), 'the page does not say "120 rows"');
  const diff = await A.page.locator('#sec-diff').evaluate(s => ({
    text: s.innerText,
    rows: [...s.querySelectorAll('table tr')].map(tr => [...tr.cells].map(c => c.innerText.trim())),
  }));
  const rr = diff.rows.find(r => r[0] === '/refund_rate');
  check(rr && rr[2] === '0.09' && rr[3] === '0.0917',
    `change since last accepted: want /refund_rate 0.09 → 0.0917, got ${JSON.stringify(rr)}:\n${diff.text}`);
  check(/accepted by alice/.test(diff.text), `change since last accepted does not name the accepted approval by alice:\n${diff.text}`);
  const marked = await A.page.locator('#sec-result mark').evaluateAll(ms => ms.map(m => ({
    value: m.innerText.trim(), item: m.closest('li') ? m.closest('li').innerText : '', visible: !!(m.offsetWidth || m.offsetHeight),
  })));
  const rate = marked.find(m => m.value === '0.0917');
  check(rate && rate.visible && /checked by rule refund-rate-watch/.test(rate.item),
    `the result's refund_rate: want 0.0917 inside a visible <mark> labelled "checked by rule refund-rate-watch", got ${JSON.stringify(marked)}`);
  const argv = await A.page.locator('#sec-steps code.argv').allInnerTexts();
  check(argv.some(a => a.trim() === 'sh clean.sh'), `steps: argv ${JSON.stringify(argv)}, want "sh clean.sh"`);
  const secrets = (await A.page.locator('#sec-secrets').innerText());
  check(/\bPARTNER_TOKEN\b/.test(secrets), `secrets: ${JSON.stringify(secrets)}, want PARTNER_TOKEN`);

  step('axe-core on run 2\'s page');
  out.axe_approval = await axe(A.page, 'the approval page');
  await shot(A.page, 'console-approval.png', {fullPage: false});
  if (SHOTS) {
    // The artifacts' previews and the change since the last accepted
    // report, each section as it renders.
    await A.page.locator('#sec-artifacts').screenshot({path: path.join(SHOTS, 'console-artifacts.png')});
    await A.page.locator('#sec-diff').screenshot({path: path.join(SHOTS, 'console-diff.png')});
  }

  step('phone width and keyboard');
  out.width_approval = await phoneWidth(A.page);
  const comment = A.page.locator('textarea#comment');
  await comment.focus();
  let tabs = 0;
  for (; tabs < 6; tabs++) {
    if (await A.page.evaluate(() => document.activeElement && document.activeElement.tagName === 'BUTTON' && document.activeElement.textContent.trim() === 'Accept')) break;
    await A.page.keyboard.press('Tab');
  }
  check(tabs < 6, 'Tab from the comment did not reach the Accept button within 5 presses');
  out.tabs_to_accept = tabs;

  step('two approvers at once');
  const B = await newPage(browser, 'carol');
  await signIn(B.page, env.CAROL_TOKEN, 'carol');
  // carol's second tab follows the stream; her first does not (it keeps
  // showing the form, as a page whose stream is down would).
  const B2 = await B.context.newPage();
  B2.setDefaultTimeout(5000);
  B2.on('pageerror', e => pageErrors.push(`carol-2: ${e.message}`));
  pages.set('carol-2', B2);
  await B.page.route('**/ui/api/events', r => r.abort());
  for (const p of [B.page, B2]) {
    await p.goto(`${BASE}/ui/approvals/${ap2}`);
    await p.getByRole('button', {name: 'Reject'}).waitFor();
  }
  await waitText(B2, /\bLive\b/, 8000);
  await comment.fill('numbers checked');
  await A.page.getByRole('button', {name: 'Accept'}).click();
  await waitText(A.page, /Accepted by alice/);
  await waitText(B2, /This approval was just accepted \(by another approver\)/, 10000);
  await B.page.locator('textarea#comment').fill('refund rate too high');
  await B.page.getByRole('button', {name: 'Reject'}).click();
  await waitText(B.page, /Already decided by alice: accepted/);
  const alerts = await B.page.getByRole('alert').allInnerTexts();
  check(alerts.some(a => /Already decided by alice/.test(a)), `carol's 409 is not in a role=alert: ${JSON.stringify(alerts)}`);

  step('read-only token');
  const hostileAp = await waitParked(hostileTask, 'the hostile run');
  out.hostile = {task_id: hostileTask, approval_id: hostileAp};
  const C = await newPage(browser, 'reader');
  await signIn(C.page, env.READER_TOKEN, 'reader');
  await C.page.goto(`${BASE}/ui/approvals/${hostileAp}`);
  await waitText(C.page, /Your token can read approvals but not decide them/);
  for (const name of ['Accept', 'Reject']) {
    check(await C.page.getByRole('button', {name, exact: true}).count() === 0, `the read-only token sees a ${name} button`);
  }
  const forged = await C.page.evaluate(async id => {
    const s = await (await fetch('/ui/api/session')).json();
    const r = await fetch(`/ui/api/approvals/${id}/accept`, {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json', 'X-CSRF-Token': s.csrf}, body: '{"comment": "forged"}'});
    return {status: r.status, body: await r.text(), csrf: !!s.csrf};
  }, hostileAp);
  check(forged.csrf && forged.status === 403, `the read-only token's POST with its CSRF token: ${forged.status} ${forged.body}, want 403`);
  const noCSRF = await A.page.evaluate(async id => {
    const r = await fetch(`/ui/api/approvals/${id}/accept`, {method: 'POST', credentials: 'same-origin',
      headers: {'Content-Type': 'application/json'}, body: '{"comment": "no csrf"}'});
    return {status: r.status, body: await r.text()};
  }, hostileAp);
  check(noCSRF.status === 403, `alice's POST without the CSRF token: ${noCSRF.status} ${noCSRF.body}, want 403`);

  step('inbox at phone width');
  await A.page.goto(BASE + '/ui/');
  await A.page.locator('table.inbox a').first().waitFor();
  out.width_inbox = await phoneWidth(A.page);
  for (const [what, w] of [['the inbox', out.width_inbox], ["run 2's page", out.width_approval]]) {
    check(w[0] <= 364, `${what} at 360 px is ${w[0]} px wide`);
    check(w[1] <= 644, `${what} at 640 px (200% zoom) is ${w[1]} px wide`);
  }

  step('the hostile run\'s page');
  out.hostile_page = await hostilePage(browser, hostileAp);

  check(!pageErrors.length, `uncaught errors in the console's pages: ${pageErrors.join('; ')}`);
  const refused = consoleErrors.filter(e => /Content Security Policy|Refused to/i.test(e));
  check(!refused.length, `the browser refused something in the console's pages: ${refused.join('; ')}`);
  // Answers the test provokes (401 before sign-in, 403, 409) are logged
  // as failed loads: anything else is reported.
  out.console_errors = consoleErrors.filter(e => !/Failed to load resource/.test(e));
  for (const [name, p] of pages) {
    if (name === 'hostile' || p.isClosed()) continue;
    const v = await p.evaluate(() => window.__violations || []);
    check(!v.length, `CSP violations in ${name}'s page: ${JSON.stringify(v)}`);
  }
  return out;
}

async function hostilePage(browser, id) {
  const H = await newPage(browser, 'hostile');
  const {page, context} = H;
  const dialogs = [], outside = [], downloads = [], popups = [];
  page.on('dialog', d => { dialogs.push(`${d.type()}: ${d.message()}`); d.dismiss().catch(() => {}); });
  context.on('request', r => {
    let origin = 'null';
    try { origin = new URL(r.url()).origin; } catch (e) { /* stays null */ }
    if (origin !== ORIGIN) outside.push(r.url());
  });
  page.on('popup', p => popups.push(p.url()));
  page.on('download', d => { downloads.push(d.suggestedFilename()); d.cancel().catch(() => {}); });
  await signIn(page, env.ALICE_TOKEN, 'alice');
  await page.goto(`${BASE}/ui/approvals/${id}`);
  await page.locator('#sec-artifacts article').first().waitFor();
  await page.locator('#sec-decision').waitFor();
  const url = page.url();

  // Open every closed <details>, hover and click the previews' images.
  const closed = page.locator('details:not([open]) > summary');
  for (let i = 0, n = await closed.count(); i < n && i < 100; i++) {
    const s = page.locator('details:not([open]) > summary').first();
    if (!await s.count()) break;
    await s.click();
  }
  const imgs = page.locator('main img');
  const imgSrcs = await imgs.evaluateAll(xs => xs.map(x => x.getAttribute('src')));
  for (let i = 0; i < imgSrcs.length; i++) {
    await imgs.nth(i).hover();
    await imgs.nth(i).click();
  }
  // Every link of the artifacts is a download from the console's route.
  const links = await page.locator('#sec-artifacts a').evaluateAll(as => as.map(a => ({
    href: a.getAttribute('href'), download: a.hasAttribute('download'), text: a.innerText.trim(),
  })));
  check(links.length >= 5, `the hostile page lists ${links.length} artifact links: ${JSON.stringify(links)}`);
  for (const l of links) {
    check(l.download && l.href.startsWith(`/ui/api/approvals/${id}/artifacts/`), `an artifact link is not a download from the console: ${JSON.stringify(l)}`);
  }
  for (const name of ['evil.html', 'evil.svg']) {
    const a = page.locator('#sec-artifacts a[download]', {hasText: name});
    await a.hover();
    const [d] = await Promise.all([page.waitForEvent('download', {timeout: 5000}), a.click()]);
    check(d.suggestedFilename() === name, `the download of ${name} is named ${d.suggestedFilename()}`);
  }
  await page.waitForTimeout(500);   // anything an injected node would do
  check(page.url() === url, `the page navigated to ${page.url()}`);

  const found = await page.evaluate(() => ({
    pwned: window.__pwned, violations: window.__violations || [],
    resultLinks: document.querySelectorAll('#sec-result a, #sec-diff a:not([href^="/ui/approvals/"])').length,
    frames: document.querySelectorAll('iframe, object, embed, frame').length,
    svgs: document.querySelectorAll('main svg').length,
    foreignImgs: [...document.querySelectorAll('img')].map(i => i.getAttribute('src')).filter(s => !s || !s.startsWith('/ui/api/approvals/')),
    scripts: [...document.scripts].map(s => s.getAttribute('src')),
  }));
  check(!dialogs.length, `dialogs opened: ${JSON.stringify(dialogs)}`);
  check(found.pwned === undefined, `window.__pwned is ${found.pwned}: a hostile script ran`);
  check(!outside.length, `requests off the console's origin: ${JSON.stringify(outside)}`);
  check(!popups.length, `popups: ${JSON.stringify(popups)}`);
  check(!found.violations.length, `CSP violations (hostile markup reached the DOM): ${JSON.stringify(found.violations)}`);
  check(found.resultLinks === 0, `${found.resultLinks} links made from the result`);
  check(found.frames === 0 && found.svgs === 0, `frames ${found.frames}, inline SVGs ${found.svgs}: want none`);
  check(!found.foreignImgs.length, `images not from the console's artifact route: ${JSON.stringify(found.foreignImgs)}`);
  check(found.scripts.length > 0 && found.scripts.every(s => /^\/ui\/assets\/[\w.-]+\.js$/.test(s || '')), `scripts in the page: ${JSON.stringify(found.scripts)}; want only the console's own files`);
  check(downloads.length === 2, `downloads: ${JSON.stringify(downloads)}, want evil.html and evil.svg`);
  // Strings of the result show JSON-quoted ("<a href=\"…\">"): their
  // parts without quotes are looked for.
  for (const text of ['<script>window.__pwned=1;alert(1)</script>', '<img src=x onerror=', 'javascript:alert(3)', 'javascript:alert(4)', '>click</a>',
    '<script>alert(5)</script>', '<script>alert(6)</script>', '=HYPERLINK("http://127.0.0.2:9/x","click")']) {
    const vis = await page.getByText(text, {exact: false}).first().isVisible().catch(() => false);
    check(vis, `the literal text ${JSON.stringify(text)} is not visible on the page`);
  }
  return {dialogs, outside, downloads, images: imgSrcs.length, links: links.length};
}

async function bulkPhase(browser) {
  const out = {};
  step('alice signs in');
  const A = await newPage(browser, 'alice');
  await signIn(A.page, env.ALICE_TOKEN, 'alice');
  await A.page.locator('table.inbox a').first().waitFor({timeout: 10000});
  // The moment the first row's link is in the page, from the navigation's
  // start (performance.now()'s origin), recorded in the page itself.
  await A.context.addInitScript(() => {
    const seen = () => {
      const a = document.querySelector('table.inbox tbody tr a');
      if (a && !window.__firstRowAt && a.getBoundingClientRect().height > 0) window.__firstRowAt = performance.now();
      return !!window.__firstRowAt;
    };
    new MutationObserver((_, o) => { if (seen()) o.disconnect(); }).observe(document, {childList: true, subtree: true});
  });
  step('first page with thousands pending');
  out.first_row_ms = [];
  for (let i = 0; i < 3; i++) {
    await A.page.goto(BASE + '/ui/', {waitUntil: 'commit'});
    await A.page.locator('table.inbox tbody tr a').first().waitFor({state: 'visible', timeout: 10000});
    const t = await A.page.evaluate(() => [window.__firstRowAt, performance.now()]);
    check(t[0], 'the first row was not seen by the page\'s observer');
    out.first_row_ms.push(Math.round(t[0]));
  }
  out.rows = await A.page.locator('table.inbox tbody tr').count();
  out.pending = (await A.page.locator('#inbox-count strong').innerText()).trim();
  const first = await A.page.locator('table.inbox tbody tr a').first().innerText();
  step('next page');
  await A.page.getByRole('button', {name: 'Next page'}).click();
  await A.page.waitForURL(/[?&]after=/);
  await A.page.waitForFunction(f => {
    const a = document.querySelector('table.inbox tbody tr a');
    return a && a.textContent !== f;
  }, first, {timeout: 5000});
  out.next_rows = await A.page.locator('table.inbox tbody tr').count();
  await A.page.getByRole('button', {name: 'First page'}).waitFor();
  return out;
}

async function report(err) {
  console.error(`[console] FAILED at step "${stepName}": ${err && err.stack || err}`);
  for (const [name, p] of pages) {
    if (p.isClosed()) continue;
    try {
      if (DEBUG) {
        const f = path.join(DEBUG, `failure-${name}.png`);
        await p.screenshot({path: f, fullPage: true, timeout: 5000});
        console.error(`[console] ${name}: screenshot ${f}`);
      }
      const text = await p.evaluate(() => document.body.innerText).catch(e => `(no text: ${e.message})`);
      console.error(`[console] ${name} at ${p.url()}:\n${text.slice(0, 6000)}\n[console] end of ${name}'s text`);
    } catch (e) {
      console.error(`[console] ${name}: ${e.message}`);
    }
  }
}

async function run() {
  check(BASE, 'AIRLOCK_API_URL is not set');
  const browser = await chromium.launch({executablePath: env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox']});
  try {
    const out = PHASE === 'bulk' ? await bulkPhase(browser) : await mainPhase(browser);
    console.log(JSON.stringify({ok: true, phase: PHASE, ...out}));
  } catch (err) {
    await report(err);
    const msg = err instanceof Failure ? err.message : `${err && err.message || err}`;
    console.log(JSON.stringify({ok: false, phase: PHASE, step: stepName, error: `${stepName}: ${msg}`}));
    process.exitCode = 1;
  } finally {
    await browser.close().catch(() => {});
  }
}

const watchdog = setTimeout(() => {
  console.log(JSON.stringify({ok: false, phase: PHASE, step: stepName, error: `${stepName}: the script ran past 150 s`}));
  process.exit(1);
}, 150000);
watchdog.unref();
await run();
