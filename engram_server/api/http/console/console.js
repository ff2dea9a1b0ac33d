// Engram console: plain JavaScript over Engram's HTTP/JSON API (the same routes as curl uses).
// The API key stays in this page's memory (or this tab's sessionStorage when asked) and is sent as
// an Authorization header: no cookie ever carries it, so other sites cannot ride on it (CSRF).
'use strict';

const KEY_SLOT = 'engram-console-key';
let apiKey = sessionStorage.getItem(KEY_SLOT) || '';
let currentCollection = '';
let nextPageToken = '';
let shown = null; // the memory in the detail panel

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c ?? '')));
  return node;
}

function say(text, isError = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', isError);
}

class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
    const info = (body.details || []).find((d) => (d['@type'] || '').endsWith('ErrorInfo'));
    this.reason = info ? info.reason : '';
  }
}

async function api(method, path, body) {
  const headers = {};
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  const init = { method, headers, credentials: 'omit', cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  const data = text ? JSON.parse(text) : {};
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function failed(err) {
  if (err instanceof ApiError) {
    if (err.status === 401) {
      say(`${err.message} — enter an API key above.`, true);
      $('api-key').focus();
      return;
    }
    say(`${err.reason || 'error'}: ${err.message}`, true);
  } else {
    say(String(err), true);
  }
}

// --- formatting ----------------------------------------------------------------------------------

const short = (enumName) => (enumName || '').replace(/^MEMORY_TYPE_|^SOURCE_TYPE_|^SOURCE_|^REFLECTION_(OUTCOME|GATE)_/, '').toLowerCase();

function ttlLeft(validUntil) {
  if (!validUntil) return 'never expires';
  const seconds = (Date.parse(validUntil) - Date.now()) / 1000;
  if (seconds <= 0) return 'expired';
  const units = [['d', 86400], ['h', 3600], ['min', 60]];
  for (const [unit, size] of units) if (seconds >= size) return `${Math.floor(seconds / size)} ${unit}`;
  return `${Math.floor(seconds)} s`;
}

const when = (ts) => (ts ? new Date(ts).toLocaleString() : '—');
const num = (x) => (typeof x === 'number' ? x.toFixed(3) : '0.000');

function scoreCell(value) {
  const v = typeof value === 'number' ? value : 0;
  return el('td', { class: 'num' }, el('meter', { min: 0, max: 1, value: Math.max(0, Math.min(1, v)), 'aria-hidden': 'true' }), ' ', num(v));
}

// --- tabs ----------------------------------------------------------------------------------------

const TABS = ['memories', 'search', 'gate', 'reflection', 'trash', 'topics'];

function selectTab(name, focus = false) {
  for (const t of TABS) {
    const tab = $(`tab-${t}`);
    const on = t === name;
    tab.setAttribute('aria-selected', String(on));
    tab.tabIndex = on ? 0 : -1;
    $(`view-${t}`).hidden = !on;
    if (on && focus) tab.focus();
  }
}

function setUpTabs() {
  TABS.forEach((t, i) => {
    const tab = $(`tab-${t}`);
    tab.addEventListener('click', () => selectTab(t));
    tab.addEventListener('keydown', (e) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (step) selectTab(TABS[(i + step + TABS.length) % TABS.length], true);
      if (e.key === 'Home') selectTab(TABS[0], true);
      if (e.key === 'End') selectTab(TABS[TABS.length - 1], true);
    });
  });
}

// --- collections and memories --------------------------------------------------------------------

async function loadCollections() {
  try {
    const data = await api('GET', '/v1/collections');
    const list = $('collections');
    list.replaceChildren();
    const collections = data.collections || [];
    for (const c of collections) {
      const button = el('button', { type: 'button', 'aria-current': String(c.name === currentCollection), onclick: () => openCollection(c.name) },
        el('span', {}, c.name), el('span', { class: 'badge', 'aria-label': `${c.memoryCount || 0} memories` }, c.memoryCount || '0'));
      list.append(el('li', {}, button));
    }
    if (!collections.length) list.append(el('li', {}, 'No collections yet.'));
    if (!currentCollection && collections.length) await openCollection(collections[0].name);
    else say(`${collections.length} collection(s).`);
  } catch (err) {
    failed(err);
  }
}

function memoryRow(m, onOpen) {
  const row = el('tr', { class: m.supersededBy ? 'superseded' : '' },
    el('td', {}, el('button', { type: 'button', class: 'link', onclick: () => onOpen(m) }, m.content)),
    el('td', {}, short(m.type)),
    el('td', { class: 'num' }, m.importance ?? ''),
    el('td', { class: 'num' }, m.supersededBy ? 'superseded' : ttlLeft(m.validUntil)),
    el('td', { class: 'num' }, m.version ?? 1),
    el('td', {}, ...(m.tags || []).map((t) => el('span', { class: 'badge' }, t))));
  return row;
}

async function openCollection(name, append = false) {
  currentCollection = name;
  for (const b of $('collections').querySelectorAll('button')) {
    b.setAttribute('aria-current', String(b.firstChild.textContent === name));
  }
  $('memories-title').textContent = `Memories in ${name}`;
  const params = new URLSearchParams({ pageSize: '50' });
  if ($('list-type').value) params.append('filter.types', $('list-type').value);
  if ($('list-history').checked) params.set('includeHistory', 'true');
  if (append && nextPageToken) params.set('pageToken', nextPageToken);
  try {
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}/memories?${params}`);
    const body = $('memories').tBodies[0];
    if (!append) body.replaceChildren();
    for (const m of data.memories || []) body.append(memoryRow(m, showMemory));
    nextPageToken = data.nextPageToken || '';
    $('more').hidden = !nextPageToken;
    say(`${body.rows.length} memor${body.rows.length === 1 ? 'y' : 'ies'} shown in ${name}.`);
  } catch (err) {
    failed(err);
  }
}

// --- detail, history, delete ---------------------------------------------------------------------

function fact(list, term, value) {
  list.append(el('dt', {}, term), el('dd', {}, value));
}

async function showMemory(m) {
  try {
    const path = `/v1/collections/${encodeURIComponent(m.collection)}/memories/${encodeURIComponent(m.id)}?includeHistory=true`;
    const data = await api('GET', path);
    const memory = data.memory;
    shown = memory;
    const facts = $('detail-facts');
    facts.replaceChildren();
    fact(facts, 'Content', memory.content);
    fact(facts, 'Type', short(memory.type));
    fact(facts, 'Importance', memory.importance ?? '');
    fact(facts, 'TTL left', ttlLeft(memory.validUntil));
    fact(facts, 'Expires', when(memory.validUntil));
    fact(facts, 'Version', memory.version ?? 1);
    if (memory.supersededBy) fact(facts, 'Superseded by', memory.supersededBy);
    fact(facts, 'Collection', memory.collection);
    fact(facts, 'Id', memory.id);
    fact(facts, 'Source', `${short(memory.source)} / ${short(memory.sourceType)}`);
    fact(facts, 'Tags', (memory.tags || []).join(', ') || '—');
    fact(facts, 'Created', when(memory.createdAt));
    fact(facts, 'Updated', when(memory.updatedAt));
    fact(facts, 'Accessed', `${memory.accessCount || 0} time(s), last ${when(memory.lastAccessedAt)}`);
    if ((memory.derivedFrom || []).length) fact(facts, 'Derived from', memory.derivedFrom.join(', '));
    const history = $('detail-history');
    history.replaceChildren();
    for (const h of data.history || []) {
      history.append(el('li', {}, `v${h.version ?? 1} (${when(h.updatedAt || h.createdAt)}): ${h.content}`));
    }
    if (!(data.history || []).length) history.append(el('li', {}, 'No earlier versions.'));
    $('detail').hidden = false;
    $('detail-title').textContent = `Memory ${memory.id.slice(0, 8)}`;
    $('detail-title').focus();
  } catch (err) {
    failed(err);
  }
}

function askDelete() {
  if (!shown) return;
  const protectedType = ['MEMORY_TYPE_IDENTITY', 'MEMORY_TYPE_DIRECTIVE'].includes(shown.type);
  $('confirm-text').textContent = `“${shown.content}” in ${shown.collection}`;
  $('force-row').hidden = !protectedType;
  $('confirm-force').checked = false;
  $('confirm').returnValue = '';
  $('confirm').showModal();
  $('confirm-cancel').focus();
}

async function confirmed() {
  if ($('confirm').returnValue !== 'delete' || !shown) return;
  const target = shown;
  try {
    const data = await api('POST', '/v1/memories:delete', {
      collection: target.collection, id: target.id, force: $('confirm-force').checked,
    });
    closeDetail();
    await loadCollections();
    if (currentCollection) await openCollection(currentCollection);
    const until = data.purgeAt ? ` In the trash until ${when(data.purgeAt)}.` : '';
    say(`Deleted ${(data.deleted || []).length} memory: “${target.content}”.${until}`);
  } catch (err) {
    failed(err);
  }
}

function closeDetail() {
  $('detail').hidden = true;
  shown = null;
}

// --- search --------------------------------------------------------------------------------------

async function search(e) {
  e.preventDefault();
  const collections = $('search-collections').value.split(',').map((c) => c.trim()).filter(Boolean);
  const request = { query: $('search-query').value, limit: Number($('search-limit').value) || 10 };
  if (collections.length) request.collections = collections;
  try {
    const data = await api('POST', '/v1/memories:search', request);
    const body = $('results').tBodies[0];
    body.replaceChildren();
    // One cell per score part, in the header's order (its data-part names the ScoreBreakdown field).
    const parts = [...$('results').tHead.rows[0].cells].map((c) => c.dataset.part).filter(Boolean);
    for (const r of data.results || []) {
      const s = r.score || {};
      body.append(el('tr', {},
        el('td', {}, el('button', { type: 'button', class: 'link', onclick: () => showMemory(r.memory) }, r.memory.content)),
        ...parts.map((part) => scoreCell(s[part])),
        el('td', {}, r.memory.collection)));
    }
    say(`${body.rows.length} result(s) for “${request.query}”.`);
  } catch (err) {
    failed(err);
  }
}

// --- the write gate ------------------------------------------------------------------------------

function decisionName(d) {
  if (d.outcome === 'ADD_OUTCOME_DUPLICATE') return `duplicate (${num(d.duplicateSimilarity)})`;
  if ((d.nearDuplicates || []).length) return 'created, near-duplicates';
  return 'created';
}

async function gate(e) {
  e.preventDefault();
  const name = $('gate-collection').value.trim();
  try {
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}/gateDecisions?limit=100`);
    const body = $('decisions').tBodies[0];
    body.replaceChildren();
    for (const d of data.decisions || []) {
      const similar = el('ul', { class: 'plain' });
      for (const n of d.nearDuplicates || []) similar.append(el('li', {}, `${num(n.similarity)} — ${n.content}`));
      if (d.outcome === 'ADD_OUTCOME_DUPLICATE') {
        similar.append(el('li', {}, el('button', { type: 'button', class: 'link', onclick: () => showMemory({ collection: name, id: d.memoryId }) }, 'the existing memory')));
      }
      body.append(el('tr', {},
        el('td', { class: 'num' }, when(d.decidedAt)),
        el('td', {}, decisionName(d) + (d.replayed ? ' (replayed)' : '')),
        el('td', {}, d.memoryId && d.outcome !== 'ADD_OUTCOME_DUPLICATE'
          ? el('button', { type: 'button', class: 'link', onclick: () => showMemory({ collection: name, id: d.memoryId }) }, d.content)
          : d.content),
        el('td', {}, similar)));
    }
    say(`${body.rows.length} gate decision(s) in ${name}.`);
  } catch (err) {
    failed(err);
  }
}

// --- reflection ----------------------------------------------------------------------------------

async function reflect(e) {
  e.preventDefault();
  const name = $('reflect-collection').value.trim();
  const out = $('reflect-result');
  out.replaceChildren();
  try {
    const r = await api('POST', `/v1/collections/${encodeURIComponent(name)}:reflect`, { dryRun: true });
    fact(out, 'Outcome', short(r.outcome));
    if (r.throttledBy) fact(out, 'Throttled by', short(r.throttledBy));
    fact(out, 'Detail', r.detail || '—');
    fact(out, 'Unreflected', `${r.unreflectedCount || 0} memories, importance ${r.unreflectedImportance || 0}`);
    fact(out, 'Next run after', when(r.nextRunAfter));
    fact(out, 'Model', r.model || '—');
    say(`Reflection state of ${name}.`);
  } catch (err) {
    failed(err);
  }
  const rows = $('runs').querySelector('tbody');
  rows.replaceChildren();
  try {
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}/reflectionRuns?limit=20`);
    for (const run of data.runs || []) {
      rows.append(el('tr', {},
        el('td', {}, when(run.startedAt)),
        el('td', {}, short(run.outcome)),
        el('td', {}, run.scheduled ? 'schedule' : 'request'),
        el('td', {}, String((run.sourceIds || []).length)),
        el('td', {}, `${(run.insightIds || []).length} stored, ${(run.draftIds || []).length} drafts, ${run.duplicates || 0} duplicates`),
        el('td', {}, run.detail || '')));
    }
  } catch (err) {
    failed(err);
  }
  if (!rows.children.length) rows.append(el('tr', {}, el('td', { colspan: '6' }, 'No run has called the LLM yet.')));
  const list = $('insights');
  list.replaceChildren();
  try {
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}_reflection/memories?pageSize=50`);
    for (const m of data.memories || []) list.append(el('li', {}, el('button', { type: 'button', class: 'link', onclick: () => showMemory(m) }, m.content)));
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 404)) failed(err);
  }
  if (!list.children.length) list.append(el('li', {}, 'No insights yet.'));
}

// --- the trash ----------------------------------------------------------------------------------

let restoring = null; // what the restore dialog asks about: {kind, collection, id?, label}

async function showTrash(e) {
  if (e) e.preventDefault();
  const name = $('trash-collection').value.trim() || 'default';
  const body = $('trash').tBodies[0];
  body.replaceChildren();
  const cols = $('trashed-collections').tBodies[0];
  cols.replaceChildren();
  try {
    const listed = await api('GET', '/v1/collections?includeTrashed=true');
    for (const c of listed.trashed || []) {
      cols.append(el('tr', {},
        el('td', {}, c.name), el('td', { class: 'num' }, c.memoryCount || '0'),
        el('td', { class: 'num' }, when(c.trashedAt)), el('td', { class: 'num' }, when(c.purgeAt)),
        el('td', {}, el('button', { type: 'button', 'aria-label': `Restore collection ${c.name}`,
          onclick: () => askRestore({ kind: 'collection', collection: c.name, label: `collection ${c.name} (${c.memoryCount || 0} memories)` }) }, 'Restore…'))));
    }
    if (!cols.rows.length) cols.append(el('tr', {}, el('td', { colspan: 5 }, 'No deleted collections.')));
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}/trash?pageSize=100`);
    for (const m of data.memories || []) {
      body.append(el('tr', {},
        el('td', {}, m.content), el('td', {}, short(m.type)),
        el('td', { class: 'num' }, when(m.trashedAt)), el('td', { class: 'num' }, when(m.purgeAt)),
        el('td', {}, el('button', { type: 'button', 'aria-label': `Restore “${m.content}”`,
          onclick: () => askRestore({ kind: 'memory', collection: name, id: m.id, label: `“${m.content}” in ${name}` }) }, 'Restore…'))));
    }
    say(`${body.rows.length} memor${body.rows.length === 1 ? 'y' : 'ies'} in the trash of ${name}.`);
  } catch (err) {
    failed(err);
  }
}

function askRestore(what) {
  restoring = what;
  $('restore-title').textContent = what.kind === 'collection' ? 'Restore this collection?' : 'Restore this memory?';
  $('restore-text').textContent = what.label;
  $('confirm-restore').returnValue = '';
  $('confirm-restore').showModal();
  $('restore-cancel').focus();
}

async function restoreConfirmed() {
  const what = restoring;
  restoring = null;
  if ($('confirm-restore').returnValue !== 'restore' || !what) return;
  try {
    if (what.kind === 'collection') {
      await api('POST', `/v1/collections/${encodeURIComponent(what.collection)}:restore`, {});
    } else {
      const data = await api('POST', `/v1/collections/${encodeURIComponent(what.collection)}/memories/${encodeURIComponent(what.id)}:restore`, {});
      what.near = (data.nearDuplicates || []).length;
    }
    await showTrash();
    await loadCollections();
    const near = what.near ? ` ${what.near} similar memor${what.near === 1 ? 'y was' : 'ies were'} added meanwhile: check for a near-copy.` : '';
    say(`Restored ${what.label}.${near}`);
  } catch (err) {
    failed(err);
  }
}

// --- topics and trigger names ------------------------------------------------------------------

function showPicked(title, memories) {
  $('picked-title').textContent = title;
  const body = $('picked').tBodies[0];
  body.replaceChildren();
  for (const m of memories) body.append(memoryRow(m, showMemory));
  if (!memories.length) body.append(el('tr', {}, el('td', { colspan: '6' }, 'No memories.')));
  $('picked').hidden = false;
}

async function openTopic(name, topic, parentName) {
  try {
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}/topics/${encodeURIComponent(topic.id)}?pageSize=100`);
    const t = data.topic || topic;
    const memories = data.memories || [];
    const within = parentName ? ` (a sub-topic of “${parentName}”)` : '';
    const more = data.nextPageToken ? `, the ${memories.length} most central shown` : '';
    showPicked(`Memories in topic “${t.name}”${within}: ${t.size || 0} in all${more}, the most central first`, memories);
    say(`${memories.length} memor${memories.length === 1 ? 'y' : 'ies'} in topic “${t.name}”.`);
  } catch (err) {
    failed(err);
  }
}

async function openTrigger(name, trigger) {
  try {
    const data = await api('POST', '/v1/triggers:get', { action: trigger, collections: [name], limit: 100 });
    const memories = data.memories || [];
    const more = data.truncated ? ' (the first 100)' : '';
    showPicked(`Memories to recall before “${data.action || trigger}”${more}, most important first`, memories);
    say(`${memories.length} memor${memories.length === 1 ? 'y' : 'ies'} for trigger “${trigger}”.`);
  } catch (err) {
    failed(err);
  }
}

function topicRow(name, t, parentName) {
  const children = t.children || [];
  return el('tr', { class: parentName ? 'subtopic' : '' },
    el('td', {}, el('button', { type: 'button', class: 'link', onclick: () => openTopic(name, t, parentName) }, t.name || t.id)),
    el('td', { class: 'num' }, t.size || 0),
    el('td', {}, el('code', {}, t.id)),
    el('td', {}, parentName || '—'),
    el('td', { class: 'num' }, parentName ? '—' : children.length));
}

async function showTopics(e) {
  if (e) e.preventDefault();
  const name = $('topics-collection').value.trim() || 'default';
  const body = $('topics').tBodies[0];
  body.replaceChildren();
  const triggers = $('triggers');
  triggers.replaceChildren();
  $('picked').hidden = true;
  try {
    const data = await api('GET', `/v1/collections/${encodeURIComponent(name)}/topics?pageSize=200`);
    for (const t of data.topics || []) {
      body.append(topicRow(name, t, ''));
      for (const c of t.children || []) body.append(topicRow(name, c, t.name || t.id));
    }
    if (!body.rows.length) body.append(el('tr', {}, el('td', { colspan: '5' }, 'No topics yet.')));
    const pack = await api('POST', '/v1/context', { collections: [name], tokenBudget: 2000 });
    const section = (pack.sections || []).find((s) => s.kind === 'CONTEXT_SECTION_KIND_TRIGGERS') || {};
    for (const item of section.items || []) {
      if (!item.trigger) continue;
      const count = item.count || 0;
      triggers.append(el('li', {}, el('button', { type: 'button', onclick: () => openTrigger(name, item.trigger),
        'aria-label': `${item.trigger}: ${count} memor${count === 1 ? 'y' : 'ies'}` },
      item.trigger, ' ', el('span', { class: 'badge', 'aria-hidden': 'true' }, count))));
    }
    if (section.omitted) triggers.append(el('li', {}, `and ${section.omitted} more (over the context pack's budget)`));
    if (!triggers.children.length) triggers.append(el('li', {}, 'No trigger names in use.'));
    const topics = data.topicCount || 0;
    say(`${topics} topic(s) and ${(section.items || []).length} trigger name(s) in ${name}.`);
  } catch (err) {
    failed(err);
  }
}

// --- start ---------------------------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  setUpTabs();
  $('api-key').value = apiKey;
  $('keep-key').checked = Boolean(sessionStorage.getItem(KEY_SLOT));
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    apiKey = $('api-key').value.trim();
    if ($('keep-key').checked && apiKey) sessionStorage.setItem(KEY_SLOT, apiKey);
    else sessionStorage.removeItem(KEY_SLOT);
    loadCollections();
  });
  $('refresh-collections').addEventListener('click', loadCollections);
  $('list-form').addEventListener('submit', (e) => { e.preventDefault(); if (currentCollection) openCollection(currentCollection); });
  $('more').addEventListener('click', () => openCollection(currentCollection, true));
  $('search-form').addEventListener('submit', search);
  $('reflect-form').addEventListener('submit', reflect);
  $('gate-form').addEventListener('submit', gate);
  $('delete').addEventListener('click', askDelete);
  $('close-detail').addEventListener('click', closeDetail);
  $('confirm').addEventListener('close', confirmed);
  $('trash-form').addEventListener('submit', showTrash);
  $('tab-trash').addEventListener('click', () => { if (currentCollection) $('trash-collection').value = currentCollection; });
  $('confirm-restore').addEventListener('close', restoreConfirmed);
  $('topics-form').addEventListener('submit', showTopics);
  $('tab-topics').addEventListener('click', () => { if (currentCollection) $('topics-collection').value = currentCollection; });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('detail').hidden && !$('confirm').open) closeDetail(); });
  loadCollections();
});
