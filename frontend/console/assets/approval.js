/* Airlock approvals console: one approval's page (section 7 of app.js's
 * plan), loaded after app.js, whose helpers it uses: el() and txt() build
 * every node as text, uiURL() and apiPath() every URL.
 *
 * Everything an agent wrote is hostile: it only ever reaches the page as a
 * text node or a non-executable attribute value.
 */
'use strict';

/* ---------- 7. One approval ---------- */

let page = null;   // {id, state, decidedByMe, comment, historyShown, status, alert, body}

function showApproval(id) {
  setTitle(id);
  const main = resetMain();
  const p = page = {id, state: null, decidedByMe: false, comment: '', historyShown: false,
    status: el('div', {role: 'status', class: 'notice', tabindex: '-1'}),
    alert: el('div', {role: 'alert', class: 'alert', tabindex: '-1'}),
    body: el('div', {}, note('Loading…'))};
  main.append(el('h1', {}, 'Approval ', el('span', {class: 'id'}, txt(id))), p.status, p.alert, p.body);
  const refresh = debounce(() => refreshApproval(p), 250);
  onLive = ev => { if (!ev.id || ev.id === id) refresh(); };
  return refreshApproval(p);
}

async function refreshApproval(p) {
  const r = await load(apiPath(p.id));
  if (!r || p !== page) return;
  if (!r.ok) { clear(p.body).append(alertBox(problem(r))); return; }
  const a = (r.data && r.data.approval) || {};
  if (p.state === 'pending' && a.state !== 'pending' && !p.decidedByMe) {
    p.status.replaceChildren(`This approval was just ${txt(a.state)} (by another approver).`,
      a.decided_by ? ` Decided by ${txt(a.decided_by)}.` : '');
  }
  p.state = a.state;
  keepFocus(() => renderApproval(p, r.data));
}

function renderApproval(p, d) {
  const a = d.approval || {}, run = a.run || {};
  const sections = [
    ['result', 'Result', resultSection(a, d.highlights, d.result_note)],
    ['artifacts', 'Artifacts', artifactsSection(p, a, d.previews)],
    ['diff', 'Change since last accepted', diffSection(d.diff)],
    ['steps', 'Steps', stepsSection(run, d.run)],
    ['egress', 'Egress', egressSection(run, d.run)],
    ['secrets', 'Secrets', secretsSection(run)],
    ['decision', 'Decision', decisionSection(p, a)],
    ['history', 'History', historySection(p)],
  ];
  add(clear(p.body), [
    facts([
      ['State', badge(a.state || 'unknown')],
      ['Queue', txt(run.queue)], ['Action', txt(run.action)], ['Principal', txt(a.principal || run.principal)],
      ['Task', el('span', {class: 'id'}, txt(a.task_id))], ['Run', el('span', {class: 'id'}, txt(a.run_id))],
      ['Created', timeEl(a.created_at)], ['Expires', noTime(a.expires_at) ? 'no expiry' : timeEl(a.expires_at)],
      ['Attempt', num(run.attempt)], ['Worker', txt(run.worker)], ['Network', run.network == null ? '' : run.network ? 'on' : 'off'],
      ['Started', timeEl(run.started_at)], ['Steps took', millis(run.steps_ms)],
      ['Decided by', a.decided_by && txt(a.decided_by + (a.by_note ? ` (${a.by_note})` : ''))],
      ['Decided at', timeEl(a.decided_at)], ['Comment', a.comment && txt(a.comment)],
      ['Promoted at', timeEl(a.promoted_at)], ['Published to', a.published_to && txt(a.published_to)],
      ['Result SHA-256', a.result_sha256 && el('code', {class: 'id'}, txt(a.result_sha256))],
    ]),
    el('h2', {id: 'h-reasons'}, 'Why it was parked'),
    (a.reasons || []).length ? el('ul', {class: 'reasons'}, a.reasons.map(x => el('li', {}, txt(x))))
      : note('No reason was given.'),
    el('nav', {class: 'toc', 'aria-label': 'On this page'},
      el('ul', {}, sections.map(([id, title]) => el('li', {}, el('a', {href: anchor('sec-' + id)}, title))))),
    sections.map(([id, title, kids]) => section(id, title, kids))]);
}

// Result: a JSON tree; values a rule looked at are marked and labelled.
const MAX_CHILDREN = 1000;
const ptrToken = k => String(k).replace(/~/g, '~0').replace(/\//g, '~1');
const isTree = v => v !== null && typeof v === 'object' && !(v instanceof RawNumber);

function highlightIndex(list) {
  const rules = new Map();
  for (const h of Array.isArray(list) ? list : []) {
    if (!h || typeof h.pointer !== 'string') continue;
    if (!rules.has(h.pointer)) rules.set(h.pointer, []);
    rules.get(h.pointer).push(txt(h.rule));
  }
  return {rules, seen: new Set(), under: ptr => [...rules.keys()].some(k => k.startsWith(ptr + '/'))};
}

function resultSection(a, highlights, resultNote) {
  const hl = highlightIndex(highlights);
  if (!('result' in a) || a.result === undefined) return note('This run has no result.');
  if (typeof a.result === 'string') return [resultNote ? note(txt(resultNote)) : '', scrollBox('Result text', el('pre', {}, txt(a.result)))];
  const tree = isTree(a.result) ? jsonTree(a.result, '', hl, 0) : el('ul', {class: 'tree'}, treeNode('(result)', a.result, '', hl, 0));
  const unseen = [...hl.rules.keys()].filter(k => !hl.seen.has(k));
  return [tree, unseen.length ? note('Also checked, not found in the result as shown: ',
    unseen.map((k, i) => [i ? '; ' : '', el('code', {}, txt(k)), ` by rule ${hl.rules.get(k).join(', ')}`])) : ''];
}

function jsonTree(v, ptr, hl, depth) {
  const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x]) : Object.entries(v);
  if (!entries.length) return note(Array.isArray(v) ? 'empty list' : 'empty object');
  return el('ul', {class: 'tree'},
    entries.slice(0, MAX_CHILDREN).map(([k, x]) => treeNode(k, x, ptr + '/' + ptrToken(k), hl, depth)),
    entries.length > MAX_CHILDREN ? el('li', {class: 'muted'}, `… and ${entries.length - MAX_CHILDREN} more, not shown`) : '');
}

function treeNode(key, v, ptr, hl, depth) {
  const rules = hl.rules.get(ptr);
  if (rules) hl.seen.add(ptr);
  const label = rules ? el('span', {class: 'rule'}, `checked by rule ${rules.join(', ')}`) : '';
  const keyEl = el('span', {class: 'key'}, txt(key));
  if (isTree(v)) {
    const size = Array.isArray(v) ? v.length : Object.keys(v).length;
    if (!size) return el('li', {}, keyEl, ': ', el('span', {class: 'v'}, Array.isArray(v) ? '[]' : '{}'), label ? [' ', label] : '');
    const n = Array.isArray(v) ? `[${plural(size, 'item')}]` : `{${plural(size, 'key')}}`;
    return el('li', {}, el('details', {open: depth === 0 || hl.under(ptr)},
      el('summary', {}, rules ? el('mark', {}, keyEl) : keyEl, ' ', el('span', {class: 'muted'}, n), label ? [' ', label] : ''),
      jsonTree(v, ptr, hl, depth + 1)));
  }
  const type = v instanceof RawNumber ? 'number' : v === null ? 'null' : typeof v;
  const val = el('span', {class: 'v v-' + type}, jsonText(v));
  return el('li', {}, keyEl, ': ', rules ? el('mark', {}, val) : val, label ? [' ', label] : '');
}

// Artifacts: a preview by kind and a download link from our own route.
function artifactURL(id, name) {
  const segs = String(name).split('/');
  return uiURL('api', 'approvals', id, 'artifacts', ...segs);
}

function artifactsSection(p, a, previews) {
  const list = Array.isArray(previews) && previews.length ? previews : (a.artifacts || []).map(x => ({...x, kind: 'download'}));
  if (!list.length) return note('This run kept no artifact.');
  return list.map(pv => {
    const name = txt(pv.name), url = artifactURL(p.id, pv.name || '');
    const link = url ? el('a', {href: url, download: true}, 'Download ', name) : note('No link: this name cannot be downloaded from here safely.');
    let body = '';
    if (pv.kind === 'table') {
      const rows = Array.isArray(pv.rows) ? pv.rows : [];
      const total = typeof pv.row_count === 'number' ? pv.row_count : rows.length;
      body = cellsTable(`${name}: ${rows.length < total ? `first ${num(rows.length)} of ` : ''}${plural(total, 'row')}`, pv.header, rows);
    } else if (pv.kind === 'json') {
      let v, ok = false;
      try { v = parseJSON(pv.text || ''); ok = true; } catch (e) { /* shown as text */ }
      body = ok && isTree(v) ? el('div', {class: 'tree-box'}, jsonTree(v, '', highlightIndex([]), 0))
        : scrollBox(`${name} text`, el('pre', {}, txt(pv.text)));
    } else if (pv.kind === 'text') {
      body = scrollBox(`${name} text`, el('pre', {}, txt(pv.text)));
    } else if (pv.kind === 'image' && url) {
      body = el('img', {src: url, alt: `artifact ${name}`, class: 'preview-img', loading: 'lazy'});
    }
    return el('article', {class: 'artifact'},
      el('h3', {class: 'id'}, name),
      el('p', {class: 'meta'}, [bytes(pv.bytes), txt(pv.content_type)].filter(Boolean).join(' · '),
        pv.sha256 ? [' · SHA-256 ', el('code', {class: 'id'}, txt(pv.sha256))] : ''),
      pv.note ? note(txt(pv.note)) : '',
      pv.truncated ? note('The preview shows only the start of this artifact; download it to see all of it.') : '',
      body, el('p', {}, link));
  });
}

// Change since the last accepted output of the same action (or run).
function diffSection(d) {
  if (!d) return note('No comparison is available.');
  const out = [];
  const ag = d.against;
  if (ag && ag.id) {
    const href = uiURL('approvals', String(ag.id));
    out.push(el('p', {}, 'Compared with ', href ? el('a', {href, class: 'id'}, txt(ag.id)) : txt(ag.id),
      ag.decided_by ? `, accepted by ${txt(ag.decided_by)}` : '', ag.decided_at ? [' at ', timeEl(ag.decided_at)] : '',
      d.basis ? ` (the same ${txt(d.basis)})` : '', '.'));
  }
  if (d.note) out.push(note(txt(d.note)));
  if (!ag) return out.length ? out : note('No earlier accepted output to compare with.');
  const keys = Array.isArray(d.keys) ? d.keys : [];
  out.push(el('h3', {}, 'Result'));
  out.push(keys.length ? dataTable('Result values changed', ['Pointer', 'Change', 'Before', 'After'],
    keys.map(k => [el('code', {}, txt(k.pointer || '(whole result)')), badge(k.change),
      el('code', {}, k.change === 'added' ? '' : jsonText(k.before)), el('code', {}, k.change === 'removed' ? '' : jsonText(k.after))]))
    : note(d.keys_note ? 'No change found among the values compared.' : 'No value of the result changed.'));
  if (d.keys_cut) out.push(note('More values changed than are listed here.'));
  if (d.keys_note) out.push(alertBox(txt(d.keys_note) + ': other values may have changed.'));
  for (const t of Array.isArray(d.artifacts) ? d.artifacts : []) {
    const name = txt(t.name);
    out.push(el('h3', {class: 'id'}, name, ' ', badge(t.change)));
    const counts = [typeof t.rows_added === 'number' ? plural(t.rows_added, 'row') + ' added' : '',
      typeof t.rows_removed === 'number' ? plural(t.rows_removed, 'row') + ' removed' : '',
      t.header_changed ? 'header changed' : ''].filter(Boolean);
    if (counts.length) out.push(el('p', {}, counts.join(', ') + '.'));
    if (t.note) out.push(note(txt(t.note)));
    for (const [rows, total, what] of [[t.added, t.rows_added, 'added'], [t.removed, t.rows_removed, 'removed']]) {
      if (!Array.isArray(rows) || !rows.length) continue;
      const shown = total > rows.length ? `first ${num(rows.length)} of ${num(total)}` : num(rows.length);
      out.push(cellsTable(`Rows ${what} in ${name} (${shown})`, t.header, rows, 'diff-' + what));
    }
  }
  return out;
}

// Steps: from the run record when kept (with output), else the summary.
function stepsSection(run, rec) {
  const steps = rec && Array.isArray(rec.steps) ? rec.steps : Array.isArray(run.steps) ? run.steps : [];
  const out = [rec && rec.note ? note(txt(rec.note)) : ''];
  if (!steps.length) return out.concat(note('No step was recorded.'));
  steps.forEach((s, i) => {
    const label = `${i + 1}. ${txt(s.name || 'step')}`;
    const output = ['stdout', 'stderr'].map(k => {
      if (typeof s[k] !== 'string') return '';
      const size = s[k + '_bytes'];
      const cut = s[k + '_truncated'] || (typeof size === 'number' && size > new TextEncoder().encode(s[k]).length);
      const kept = typeof size !== 'number' ? '' : cut ? `, first part kept of ${bytes(size)}` : `, ${bytes(size)}`;
      const enc = s[k + '_encoding'] ? ` (${txt(s[k + '_encoding'])})` : '';
      return el('details', {}, el('summary', {}, `${k}${enc}${kept}`),
        s[k] ? scrollBox(`${k} of step ${label}`, el('pre', {}, txt(s[k]))) : note('(empty)'));
    });
    out.push(el('article', {class: 'step'}, el('h3', {}, label),
      facts([['Command', s.argv && el('code', {class: 'argv'}, argvText(s.argv))], ['Verdict', s.verdict && badge(s.verdict)],
        ['Exit code', s.exit_code == null ? (s.signal ? '' : 'none') : num(s.exit_code)], ['Signal', txt(s.signal || '')],
        ['Took', millis(s.duration_ms)], ['Error', s.error && txt(s.error)],
        ['Limits hit', Array.isArray(s.limits_hit) && s.limits_hit.length && txt(s.limits_hit.join(', '))]]),
      output));
  });
  return out;
}

function egressSection(run, rec) {
  const list = (rec && Array.isArray(rec.egress) ? rec.egress : []).filter(e => e && typeof e === 'object');
  if (!list.length) {
    return note(run.network === false ? 'The network was off for this run.'
      : rec && rec.note ? 'No egress record is kept for this run.' : 'The run made no connection.');
  }
  const first = ['host', 'port', 'allowed', 'bytes_up', 'bytes_down'];
  const cols = [...new Set([...first.filter(k => list.some(e => k in e)), ...list.flatMap(e => Object.keys(e || {}))])];
  const cell = (k, v) => v == null ? '' : k === 'host' && v === '' ? '(no destination named)' : k === 'allowed' ? (v ? 'allowed' : 'refused')
    : /^bytes/.test(k) && typeof v === 'number' ? bytes(v) : /_at$/.test(k) ? timeEl(v) : typeof v === 'object' ? jsonText(v) : txt(v);
  return dataTable('Network connections of the run', cols.map(cap), list.map(e => cols.map(k => cell(k, e[k]))));
}

function secretsSection(run) {
  const s = Array.isArray(run.secrets) ? run.secrets : [];
  return s.length ? [note('Names only: the values are never shown.'), el('ul', {class: 'secrets'}, s.map(n => el('li', {}, el('code', {}, txt(n)))))]
    : note('No secret was given to this run.');
}

// Decision: a form for a pending approval when the token may decide.
function decisionSection(p, a) {
  const cannot = !session || !session.can_decide ? el('p', {}, 'Your token can read approvals but not decide them.') : '';
  if (a.state !== 'pending') {
    return [el('p', {}, 'This approval is ', badge(a.state || 'unknown'),
      a.decided_by ? ` (by ${txt(a.decided_by)}${a.decided_at ? ', ' : ''}` : '', a.decided_by && a.decided_at ? timeEl(a.decided_at) : '',
      a.decided_by ? ')' : '', '.'), cannot];
  }
  if (cannot) return cannot;
  const ta = el('textarea', {id: 'comment', name: 'comment', rows: '4', 'aria-describedby': 'comment-hint comment-error'});
  ta.value = p.comment;
  on(ta, 'input', () => { p.comment = ta.value; });
  const ui = {ta, err: el('p', {id: 'comment-error', class: 'field-error'}), alert: el('div', {role: 'alert', class: 'alert'})};
  ui.accept = el('button', {type: 'button', class: 'accept', id: 'btn-accept'}, 'Accept');
  ui.reject = el('button', {type: 'button', class: 'reject', id: 'btn-reject'}, 'Reject');
  on(ui.accept, 'click', () => decide(p, 'accept', ui));
  on(ui.reject, 'click', () => decide(p, 'reject', ui));
  const form = el('form', {class: 'decision', 'aria-labelledby': 'h-decision'},
    el('div', {class: 'field'}, el('label', {for: 'comment'}, 'Comment'),
      el('p', {id: 'comment-hint', class: 'hint'}, 'Kept in the history with your decision. A rejection needs one.'), ta, ui.err),
    ui.alert, el('div', {class: 'buttons'}, ui.accept, ui.reject));
  on(form, 'submit', ev => ev.preventDefault());
  return form;
}

async function decide(p, verb, ui) {
  if (p.busy) return;
  p.busy = ui.accept.disabled = ui.reject.disabled = true;
  ui.err.textContent = ui.alert.textContent = '';
  ui.ta.removeAttribute('aria-invalid');
  const r = await api('POST', apiPath(p.id, verb), {comment: ui.ta.value});
  p.busy = ui.accept.disabled = ui.reject.disabled = false;
  if (r.status === 401) return sessionLost();
  if (r.ok) {
    const v = (r.data && r.data.approval) || r.data || {};
    p.decidedByMe = true;
    p.comment = '';
    p.status.replaceChildren(`${verb === 'accept' ? 'Accepted' : 'Rejected'} by ${txt(v.decided_by || session.name)}`);
    p.alert.replaceChildren();
  } else if (r.status === 409) {
    const x = r.data || {};
    p.state = x.state || 'decided';     // not "just decided" again by the live notice
    add(clear(p.alert), [`Already decided by ${txt(x.decided_by || 'someone else')}: ${txt(x.state || 'decided')}`,
      noTime(x.decided_at) ? '' : [' at ', timeEl(x.decided_at)]]);
  } else if (r.status === 400 && (!r.data.field || r.data.field === 'comment')) {
    ui.err.textContent = problem(r);
    ui.ta.setAttribute('aria-invalid', 'true');
    return ui.ta.focus();
  } else {
    ui.alert.textContent = problem(r);
    return;
  }
  await refreshApproval(p);
  (r.ok ? p.status : p.alert).focus();
}

function historySection(p) {
  const out = el('div', {id: 'history-out'});
  const btn = el('button', {type: 'button', id: 'btn-history', 'aria-controls': 'history-out'}, 'History');
  on(btn, 'click', () => loadHistory(p, out));
  if (p.historyShown) loadHistory(p, out);
  return [btn, out];
}

async function loadHistory(p, out) {
  p.historyShown = true;
  out.replaceChildren(note('Loading the history…'));
  const r = await load(apiPath(p.id, 'history'));
  if (!r || p !== page) return;
  if (!r.ok) return out.replaceChildren(alertBox(problem(r)));
  const h = (Array.isArray(r.data.history) ? r.data.history : []).filter(e => e && typeof e === 'object');
  if (!h.length) return out.replaceChildren(note('No history.'));
  const cols = [...new Set(['event', 'from', 'to', 'by', 'at', 'comment', ...h.flatMap(Object.keys)])]
    .filter(k => h.some(e => e[k] != null && e[k] !== ''));
  const cell = (k, v) => v == null ? '' : (k === 'at' || /_at$/.test(k)) && !noTime(v) ? timeEl(v)
    : typeof v === 'object' ? jsonText(v) : txt(v);
  out.replaceChildren(dataTable(`History of ${txt(p.id)}`, cols.map(cap), h.map(e => cols.map(k => cell(k, e[k])))));
}
