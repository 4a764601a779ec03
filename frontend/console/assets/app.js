/* Airlock approvals console: the browser side (with approval.js, one
 * approval's page), in plain scripts: no build step, no dependency.
 *
 * Structure (top to bottom):
 *   1. DOM helpers: el() builds every node (text only, never HTML), txt()
 *      makes hidden characters visible, uiURL() is the only source of href/src.
 *   2. Formatting: times (<time>), durations against the server clock, bytes.
 *   3. api(): fetch wrapper (same-origin cookie, CSRF header, problem+json),
 *      parseJSON() keeps numbers that would lose digits as written.
 *   4. Session: boot, sign-in form, sign-out, header.
 *   5. Live updates: one EventSource; the current page sets onLive.
 *   6. Inbox: filters and cursor kept in the URL query, table, paging.
 *   7. One approval: summary, Result tree, Artifacts, Change since last
 *      accepted, Steps, Egress, Secrets, Decision, History: approval.js,
 *      loaded after this file.
 *   8. Router: location.pathname picks the page; popstate re-routes.
 *
 * Everything an agent wrote is hostile: it only ever reaches the page as a
 * text node or a non-executable attribute value. Links are built only from
 * our own paths with encodeURIComponent per segment.
 */
'use strict';

/* ---------- 1. DOM helpers ---------- */

class SafeURL { constructor(s) { this.s = s; } toString() { return this.s; } }

// uiURL('approvals', id) -> /ui/approvals/ID; each segment encoded. A
// segment that is empty, "." or ".." would be resolved by the URL parser
// (even percent-encoded), so it gets no URL at all (null).
function uiURL(...segs) {
  if (segs.some(s => s === '' || s === '.' || s === '..')) return null;
  return new SafeURL('/ui/' + segs.map(encodeURIComponent).join('/'));
}
const INBOX = new SafeURL('/ui/');
const anchor = id => new SafeURL('#' + id);
const apiPath = (id, ...rest) => '/ui/api/approvals/' + [id, ...rest].map(encodeURIComponent).join('/');

// el(tag, attrs, ...children): attributes via setAttribute, children as
// nodes or text nodes. Refuses style, on* handlers and any href/src that
// is not a SafeURL.
function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    const lk = k.toLowerCase();
    if (lk === 'style' || lk.startsWith('on') || lk === 'srcdoc') throw new Error('el: refused attribute ' + k);
    if ((lk === 'href' || lk === 'src' || lk === 'action') && !(v instanceof SafeURL)) throw new Error('el: unsafe ' + k);
    n.setAttribute(k, v === true ? '' : String(v));
  }
  add(n, kids);
  return n;
}
function add(n, kids) {
  for (const k of kids) {
    if (k == null || k === false) continue;
    if (Array.isArray(k)) add(n, k);
    else n.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return n;
}
const on = (n, type, fn) => { n.addEventListener(type, fn); return n; };
const clear = n => { n.replaceChildren(); return n; };

// Control, bidi-override and zero-width characters of agent text shown as
// \uXXXX, so a string cannot reorder or hide what the approver reads.
// Control and format characters (Cc, Cf: bidi overrides, zero-width,
// soft hyphen, tags), line and paragraph separators, Hangul fillers and
// variation selectors, astral ones too (the u flag).
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\u115F\u1160\u3164\uFFA0\u034F\u180E\uFE00-\uFE0F\u{E0100}-\u{E01EF}]/gu;
const txt = s => String(s ?? '').replace(HIDDEN, c =>
  c === '\n' || c === '\t' || c === '\r' ? c : '\\u{' + c.codePointAt(0).toString(16).padStart(4, '0') + '}');

const cap = s => s.charAt(0).toUpperCase() + s.slice(1).replace(/_/g, ' ');
const badge = (state) => el('span', {class: 'badge badge-' + String(state).replace(/[^a-z]/g, '')}, txt(state));
const scrollBox = (label, child) => el('div', {class: 'scroll', tabindex: '0', role: 'region', 'aria-label': label}, child);
const section = (id, title, ...kids) =>
  el('section', {id: 'sec-' + id, 'aria-labelledby': 'h-' + id}, el('h2', {id: 'h-' + id}, title), ...kids);
const note = (...kids) => el('p', {class: 'muted'}, ...kids);
const alertBox = msg => el('div', {role: 'alert', class: 'alert'}, msg);

// A definition list of [term, value] pairs; empty values are left out.
function facts(pairs) {
  return el('dl', {class: 'facts'}, pairs.filter(([, v]) => v != null && v !== '' && v !== false)
    .map(([k, v]) => el('div', {}, el('dt', {}, k), el('dd', {}, v))));
}

// A table with caption and column headers, inside a focusable scroll region.
function dataTable(caption, header, rows, cls) {
  return scrollBox(caption, el('table', {class: cls || 'data'},
    el('caption', {}, caption),
    el('thead', {}, el('tr', {}, header.map(h => el('th', {scope: 'col'}, h)))),
    el('tbody', {}, rows.map(r => el('tr', {}, r.map(c => el('td', {}, c)))))));
}

// An agent's table (CSV rows, diff rows): ragged rows get named extra
// columns, every cell is text.
function cellsTable(caption, header, rows, cls) {
  header = Array.isArray(header) ? header : [];
  rows = (Array.isArray(rows) ? rows : []).map(r => Array.isArray(r) ? r : []);
  const width = rows.reduce((w, r) => Math.max(w, r.length), Math.max(header.length, 1));
  const head = Array.from({length: width}, (_, i) => i < header.length ? txt(header[i]) : `(column ${i + 1})`);
  return dataTable(caption, head, rows.map(r => r.map(txt)), 'data csv ' + (cls || ''));
}

// Re-render with fn but keep the focused control (found again by id, or a
// link by its href) and its caret, so live updates do not lose the user's place.
function keepFocus(fn) {
  const a = document.activeElement, id = a && a.id, href = a && a.tagName === 'A' && a.getAttribute('href');
  const sel = a && typeof a.selectionStart === 'number' ? [a.selectionStart, a.selectionEnd] : null;
  fn();
  if (!a || document.activeElement === a || document.contains(a)) return;
  const n = id ? document.getElementById(id) : href ? [...document.querySelectorAll('main a')].find(x => x.getAttribute('href') === href) : null;
  if (n) { n.focus(); if (sel && typeof n.setSelectionRange === 'function') n.setSelectionRange(...sel); }
}

function debounce(fn, ms) {
  let t = 0;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

/* ---------- 2. Formatting ---------- */

const noTime = iso => !iso || typeof iso !== 'string' || iso.startsWith('0001-01-01') || isNaN(Date.parse(iso));
function timeEl(iso) {
  if (noTime(iso)) return '';
  const text = new Date(iso).toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'medium'});
  return el('time', {datetime: iso}, text);
}
function dur(ms) {
  const m = Math.floor(Math.abs(ms) / 60000);
  if (m < 1) return 'under 1 min';
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}
const millis = ms => typeof ms !== 'number' ? '' : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
const num = n => typeof n === 'number' ? n.toLocaleString() : txt(n);
const plural = (n, one, many) => `${num(n)} ${n === 1 ? one : many || one + 's'}`;
function bytes(n) {
  if (typeof n !== 'number') return '';
  if (n < 1024) return plural(n, 'byte');
  let v = n / 1024, i = 0;
  while (v >= 1024 && i < 2) { v /= 1024; i++; }
  return `${v.toFixed(1)} ${['KiB', 'MiB', 'GiB'][i]} (${n.toLocaleString()} bytes)`;
}
// argv as one shell-like line (quoted where needed), for reading only.
const shq = s => /^[\w@%+=:,./-]+$/.test(s) ? s : `'${String(s).replace(/'/g, `'\\''`)}'`;
const argvText = argv => Array.isArray(argv) ? txt(argv.map(shq).join(' ')) : '';

/* ---------- 3. API ---------- */

// A JSON number that would lose digits as a double keeps its source text.
class RawNumber { constructor(s) { this.s = s; } }
function parseJSON(text) {
  return JSON.parse(text, (k, v, ctx) => {
    if (typeof v !== 'number' || !ctx || typeof ctx.source !== 'string') return v;
    const digits = ctx.source.replace(/^-/, '').replace(/[eE].*$/, '').replace('.', '').replace(/^0+/, '');
    // As written when a double would lose digits, overflow (1e400 is no
    // Infinity) or underflow (1e-400 is no 0).
    const lossy = (digits.length > 15 && String(v) !== ctx.source) || !isFinite(v) || (v === 0 && /[1-9]/.test(digits));
    return lossy ? new RawNumber(ctx.source) : v;
  });
}
// JSON text of a value (RawNumber as written, strings with hidden characters shown).
function jsonText(v) {
  if (v === undefined) return '(absent)';
  if (v instanceof RawNumber) return v.s;
  if (Array.isArray(v)) return '[' + v.map(jsonText).join(', ') + ']';
  if (v && typeof v === 'object') return '{' + Object.entries(v).map(([k, x]) => txt(JSON.stringify(k)) + ': ' + jsonText(x)).join(', ') + '}';
  return txt(JSON.stringify(v));
}

let session = null;   // {name, can_decide, csrf} once signed in

async function api(method, path, body) {
  const headers = {Accept: 'application/json, application/problem+json'};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && session) headers['X-CSRF-Token'] = session.csrf;
  let res, text;
  try {
    res = await fetch(path, {method, credentials: 'same-origin', headers, body: body === undefined ? undefined : JSON.stringify(body)});
    text = await res.text();
  } catch (e) {
    return {status: 0, ok: false, data: {detail: 'The server could not be reached. Check the connection and try again.'}};
  }
  let data = {}, ok = res.ok;
  if (text) {
    try { data = parseJSON(text) || {}; } catch (e) {
      ok = false; // an answer that cannot be read is no answer: never an empty page
      data = {detail: `Unexpected answer from the server (HTTP ${res.status}): it could not be read.`};
    }
  }
  return {status: res.status, ok, data};
}
const problem = r => txt((r.data && (r.data.detail || r.data.title)) || `The request failed (HTTP ${r.status}).`);

// GET for a page: a 401 means the session ended, so back to sign-in (null).
async function load(path) {
  const r = await api('GET', path);
  if (r.status === 401) { sessionLost(); return null; }
  return r;
}

/* ---------- 4. Session and page shell ---------- */

const $ = id => document.getElementById(id);
let gen = 0;          // bumps on every page render; stale async answers check it
let onLive = null;    // the current page's handler of approval events

function setTitle(t) { document.title = `${t} — Airlock`; }
function resetMain() { gen++; onLive = null; page = null; return clear($('main')); }

function renderHeader() {
  const who = $('who');
  clear(who);
  who.hidden = !session;
  if (!session) return;
  const out = el('button', {type: 'button', class: 'link', id: 'signout'}, 'Sign out');
  on(out, 'click', signOut);
  who.append(el('span', {id: 'live', class: 'live', 'aria-live': 'polite'}, 'Connecting…'),
    el('span', {class: 'whoami'}, 'Signed in as ', el('strong', {}, txt(session.name))), out);
}

function showSignIn(msg, isStatus) {
  session = null;
  stopLive();
  renderHeader();
  setTitle('Sign in');
  const main = resetMain();
  const err = el('div', {role: 'alert', class: 'alert', id: 'signin-error'}, isStatus ? '' : msg || '');
  const input = el('input', {type: 'password', id: 'token', name: 'token', autocomplete: 'current-password',
    required: true, 'aria-describedby': 'token-hint'});
  const btn = el('button', {type: 'submit', class: 'primary'}, 'Sign in');
  const form = el('form', {class: 'card signin', 'aria-labelledby': 'signin-h'},
    el('div', {class: 'field'}, el('label', {for: 'token'}, 'Token'), input,
      el('p', {id: 'token-hint', class: 'hint'}, 'An Airlock API token allowed to read approvals.')),
    btn);
  main.append(el('h1', {id: 'signin-h'}, 'Sign in'),
    el('p', {role: 'status', class: 'status'}, isStatus ? msg : ''), err, form);
  on(form, 'submit', async ev => {
    ev.preventDefault();
    btn.disabled = true;
    err.textContent = '';
    const r = await api('POST', '/ui/api/session', {token: input.value});
    btn.disabled = false;
    if (!r.ok) { err.textContent = problem(r); input.select(); input.focus(); return; }
    input.value = '';
    const s = await api('GET', '/ui/api/session');
    if (s.status === 401) {
      err.textContent = 'Your browser did not keep the session cookie: open the console over HTTPS (or on localhost).';
      return;
    }
    if (!s.ok) { err.textContent = problem(s); return; }
    await signedIn(s.data);
    $('main').focus();
  });
  input.focus();
}

async function signedIn(s) {
  session = s;
  renderHeader();
  startLive();
  await route();
}

function sessionLost() {
  if (session) showSignIn('Your session has ended. Sign in again.');
}

async function signOut() {
  const r = await api('DELETE', '/ui/api/session');
  if (r.ok || r.status === 401) return showSignIn('You are signed out.', true);
  $('main').prepend(alertBox(problem(r)));
}

/* ---------- 5. Live updates ---------- */

let es = null, liveTimer = 0, backoff = 1000, missed = false;

function setLive(text) {
  const n = $('live');
  if (n && n.textContent !== text) n.textContent = text;
  if (n) n.classList.toggle('on', text === 'Live');
}

function startLive() {
  stopLive();
  es = new EventSource('/ui/api/events');
  on(es, 'open', () => {
    backoff = 1000;
    setLive('Live');
    if (missed && onLive) onLive({id: ''});   // events may have passed while away
    missed = false;
  });
  on(es, 'approval', e => {
    let d = null;
    try { d = JSON.parse(e.data); } catch (err) { /* treat as "something changed" */ }
    if (onLive) onLive(d && typeof d === 'object' ? d : {id: ''});
  });
  on(es, 'end', () => reconnect(250));
  on(es, 'error', () => {
    setLive('Reconnecting…');
    missed = true;
    if (es && es.readyState === EventSource.CLOSED) reconnect(backoff);
  });
}
function reconnect(delay) {
  stopLive();
  setLive('Reconnecting…');
  missed = true;
  liveTimer = setTimeout(async () => {
    const s = await api('GET', '/ui/api/session');   // closed for a lost session?
    if (s.status === 401) return sessionLost();
    if (session) startLive();
  }, delay);
  backoff = Math.min(backoff * 2, 30000);
}
function stopLive() {
  clearTimeout(liveTimer);
  if (es) es.close();
  es = null;
}

/* ---------- 6. Inbox ---------- */

const FILTERS = ['queue', 'action', 'principal'];

function inboxQuery() {
  const q = new URLSearchParams(location.search), f = {};
  for (const k of [...FILTERS, 'after']) f[k] = q.get(k) || '';
  return f;
}
function inboxURL(f) {
  const q = new URLSearchParams();
  for (const k of [...FILTERS, 'after']) if (f[k]) q.set(k, f[k]);
  const s = q.toString();
  return '/ui/' + (s ? '?' + s : '');
}

function showInbox() {
  setTitle('Inbox');
  const main = resetMain();
  const f = inboxQuery();
  const inputs = {};
  const form = el('form', {class: 'filters', role: 'search', 'aria-label': 'Filter approvals'},
    FILTERS.map(k => el('div', {class: 'field'}, el('label', {for: 'f-' + k}, cap(k)),
      inputs[k] = el('input', {type: 'text', id: 'f-' + k, name: k, value: f[k], autocomplete: 'off'}))),
    el('div', {class: 'buttons'}, el('button', {type: 'submit', class: 'primary'}, 'Filter'),
      on(el('button', {type: 'button', id: 'f-clear'}, 'Clear'), 'click', () => {
        for (const k of FILTERS) inputs[k].value = '';
        go({});
      })));
  const box = el('div', {id: 'results'}, note('Loading…'));
  main.append(el('h1', {}, 'Inbox'), form, box);

  const g = gen;
  // go: a new query (filters or page) pushed to the URL, then fetched.
  function go(f2) { history.pushState(null, '', inboxURL(f2)); refresh(true); }
  function refresh(focus) { return loadInbox(box, inboxQuery(), g, focus, go); }
  on(form, 'submit', ev => {
    ev.preventDefault();
    const f2 = {};
    for (const k of FILTERS) f2[k] = inputs[k].value.trim();
    go(f2);
  });
  onLive = debounce(() => refresh(false), 250);
  refresh(false);
}

async function loadInbox(box, f, g, focus, go) {
  const r = await load('/ui/api/approvals' + inboxURL(f).slice(4));
  if (!r || g !== gen) return;
  keepFocus(() => {
    clear(box);
    if (!r.ok) return box.append(alertBox(problem(r)));
    box.append(...inboxResults(r.data, f, go));
  });
  if (focus) $('inbox-count').focus();
}

function inboxResults(d, f, go) {
  const list = Array.isArray(d.approvals) ? d.approvals : [];
  const now = Date.parse(d.now) || Date.now();
  const used = FILTERS.filter(k => f[k]);
  const count = el('p', {id: 'inbox-count', class: 'count', tabindex: '-1'},
    el('strong', {}, d.pending == null ? `${num(list.length)}${d.next ? '+' : ''} pending in your queues` : `${num(d.pending)} pending`),
    used.length ? ` in all. This list is filtered: ${used.map(k => `${k} “${f[k]}”`).join(', ')}.` : '',
    f.after ? ' Not the first page.' : '');
  const out = [count];
  if (!list.length) {
    out.push(el('p', {class: 'empty'}, used.length ? 'No pending approvals match these filters.' : 'No pending approvals'));
  } else {
    const cols = ['Approval', 'Queue', 'Action', 'Principal', 'Age', 'Time left', 'Reasons'];
    const rows = list.map(a => {
      const href = uiURL('approvals', String(a.id || ''));
      const left = noTime(a.expires_at) ? 'no expiry' : Date.parse(a.expires_at) - now;
      const cells = [
        href ? el('a', {href, class: 'id'}, txt(a.id)) : txt(a.id),
        txt(a.queue), txt(a.action), txt(a.principal),
        noTime(a.created_at) ? '' : el('span', {title: a.created_at}, dur(now - Date.parse(a.created_at))),
        typeof left === 'string' ? left : left <= 0 ? 'expired' : dur(left),
        el('ul', {class: 'reasons'}, (a.reasons || []).map(x => el('li', {}, txt(x)))),
      ];
      return el('tr', {}, cells.map((c, i) => el('td', {'data-label': cols[i]}, c)));
    });
    out.push(scrollBox('Pending approvals', el('table', {class: 'data inbox'},
      el('caption', {class: 'sr-only'}, 'Pending approvals, newest first'),
      el('thead', {}, el('tr', {}, cols.map(c => el('th', {scope: 'col'}, c)))),
      el('tbody', {}, rows))));
  }
  const pager = el('div', {class: 'buttons pager'});
  if (f.after) pager.append(on(el('button', {type: 'button', id: 'page-first'}, 'First page'), 'click', () => go({...f, after: ''})));
  if (d.next) pager.append(on(el('button', {type: 'button', id: 'page-next'}, 'Next page'), 'click', () => go({...f, after: d.next})));
  if (pager.firstChild) out.push(el('nav', {'aria-label': 'Pages'}, pager));
  return out;
}

/* ---------- 8. Router and boot ---------- */

async function route() {
  const m = /^\/ui\/approvals\/([^/]+)\/?$/.exec(location.pathname);
  if (m) {
    let id = null;
    try { id = decodeURIComponent(m[1]); } catch (e) { /* not found below */ }
    if (id) return showApproval(id);
  }
  if (/^\/ui\/?$/.test(location.pathname)) return showInbox();
  setTitle('Not found');
  resetMain().append(el('h1', {}, 'Page not found'), el('p', {}, el('a', {href: INBOX}, 'Go to the inbox')));
}

async function boot() {
  on(window, 'popstate', () => { if (session) route(); });
  // Back/forward cache: the EventSource was closed; reopen it and re-read the page.
  on(window, 'pageshow', e => { if (e.persisted && session) { startLive(); route(); } });
  const r = await api('GET', '/ui/api/session');
  if (r.ok) return signedIn(r.data);
  if (r.status === 401) return showSignIn('');
  showSignIn(problem(r));
}

// DOMContentLoaded comes after every deferred script: approval.js too.
if (document.readyState === 'complete') boot(); else on(document, 'DOMContentLoaded', boot);
