// The search page's script (tpas_nb/templates/search.html.j2 inlines it): calls the JSON API of tpas_nb.search.make_app
// and inserts what the server says as text (textContent), never as HTML.
"use strict";
const $ = id => document.getElementById(id);
let last = [], lastQuery = '';
const token = new URLSearchParams(location.search).get('token');   // a shared page's token: kept in the address, the cookie carries it to the API

function showError(msg) { const e = $('error'); e.textContent = msg; e.style.display = msg ? 'block' : 'none'; }
function setStatus(text, state) { const s = $('status'); s.textContent = text; s.dataset.state = state; }

async function getJSON(url, opts) {
  let r;
  try { r = await fetch(url, opts); } catch (e) { throw new Error('the server does not answer (' + e.message + '): is tpas_search --serve still running?'); }
  let body = null;
  try { body = await r.json(); } catch (e) { }
  if (!r.ok) throw new Error((body && body.detail) ? body.detail : ('HTTP ' + r.status));
  return body;
}

async function loadInfo() {
  try {
    const i = await getJSON('api/info');
    $('info').textContent = i.summary;
    $('ktest').textContent = i.k_test;
    $('itm').disabled = i.k_test === 0;
    if (!i.n_images) setStatus('no folder indexed: index one below', 'idle');
  } catch (e) { $('info').textContent = ''; showError(e.message); }
}

async function search(push) {
  const q = $('q').value, topk = $('topk').value, itm = $('itm').checked;
  showError('');
  const params = new URLSearchParams({ q: q, topk: topk, itm: itm ? '1' : '0' });
  if (push) {
    const address = new URLSearchParams(params);
    if (token) address.set('token', token);
    history.pushState(null, '', '?' + address.toString());
  }
  setStatus('searching…', 'busy');
  try {
    const r = await getJSON('api/search?' + params.toString());
    last = r.results; lastQuery = r.query;
    render(r);
    setStatus(`top ${r.results.length} of ${r.n_images.toLocaleString('en')} images for “${r.query}” · ` +
              (r.k_test ? `ITC over all, ITM re-ranking of the top ${r.k_test}` : 'ITC only') + ` · ${r.ms.toFixed(0)} ms`, 'done');
  } catch (e) {
    last = []; $('results').replaceChildren(); setStatus('', 'error'); showError(e.message);
  }
}

function render(r) {
  const items = r.results.map(x => {
    const li = document.createElement('li');
    li.tabIndex = 0; li.dataset.rank = x.rank; li.dataset.path = x.path; li.dataset.score = x.score; li.dataset.stage = x.stage;
    const img = document.createElement('img'); img.src = x.image; img.alt = x.path; img.loading = 'lazy';
    img.onerror = () => { img.alt = 'cannot load ' + x.path; };
    const head = document.createElement('div');
    const rk = document.createElement('span'); rk.className = 'rank'; rk.textContent = '#' + x.rank;
    const st = document.createElement('span'); st.className = 'stage ' + x.stage; st.textContent = x.stage.toUpperCase();
    head.append(rk, st);
    const sc = document.createElement('div'); sc.className = 'score';
    for (const t of (x.stage === 'itm' ? [`ITM ${x.score.toFixed(2)}`] : []).concat([`ITC ${x.itc_score.toFixed(3)}`])) {
      const s = document.createElement('span'); s.textContent = t; sc.append(s);
    }
    const p = document.createElement('div'); p.className = 'path'; p.textContent = x.path; p.title = x.path;
    li.append(img, head, sc, p);
    li.onclick = () => openDetail(x);
    li.onkeydown = e => { if (e.key === 'Enter') openDetail(x); };
    return li;
  });
  $('results').replaceChildren(...items);
}

async function openDetail(x) {
  $('d-title').textContent = `#${x.rank} · ${x.path} · ` +
    (x.stage === 'itm' ? `ITM ${x.score.toFixed(2)} · ITC ${x.itc_score.toFixed(3)}` : `ITC ${x.itc_score.toFixed(3)}`);
  $('d-img').src = x.image;
  $('d-query').textContent = ''; $('d-caption').textContent = ''; $('d-meta').textContent = ''; $('d-posefig').style.display = 'none';
  $('detail').classList.add('open'); $('detail').dataset.path = x.path;
  try {
    const it = await getJSON('api/item?' + new URLSearchParams({ path: x.path }).toString());
    if (it.pose) { $('d-pose').src = it.pose; $('d-posefig').style.display = ''; }
    labelled($('d-query'), 'your query: ', '“' + lastQuery + '”');
    if (it.captions.length) labelled($('d-caption'), it.captions.length > 1 ? 'its captions: ' : 'its caption: ', it.captions.map(c => '“' + c + '”').join('\n'));
    else labelled($('d-caption'), 'its caption: ', 'none (the folder is not a split of a PAB dataset with annotations)', 'none');
    $('d-meta').textContent = it.meta;
  } catch (e) { $('d-meta').textContent = e.message; }
}
function labelled(el, label, text, cls) {
  const l = document.createElement('span'); l.className = 'label'; l.textContent = label;
  const t = document.createElement('span'); t.textContent = text; if (cls) t.className = cls;
  el.replaceChildren(l, t);
}
function closeDetail() { $('detail').classList.remove('open'); }

$('search').onsubmit = e => { e.preventDefault(); search(true); };
$('close').onclick = closeDetail;
$('detail').onclick = e => { if (e.target === $('detail')) closeDetail(); };
document.addEventListener('keydown', e => { if (e.key === 'Escape') closeDetail(); });
$('folderform').onsubmit = async e => {
  e.preventDefault(); showError(''); setStatus('indexing ' + $('folder').value + ' …', 'busy');
  try {
    const r = await getJSON('api/index', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ folder: $('folder').value }) });
    setStatus(r.summary, 'indexed'); $('results').replaceChildren(); await loadInfo();
  } catch (err) { setStatus('', 'error'); showError(err.message); }
};

function fromURL() {
  const u = new URLSearchParams(location.search);
  $('q').value = u.get('q') || '';
  const k = u.get('topk');
  if (k && ![...$('topk').options].some(o => o.value === k)) $('topk').add(new Option(k));
  if (k) $('topk').value = k;
  if (u.has('itm')) $('itm').checked = u.get('itm') !== '0';
  return u;
}
window.onpopstate = () => { fromURL(); if ($('q').value) search(false); };
(async () => {
  await loadInfo();
  const u = fromURL();
  if (u.has('q')) {
    await search(false);
    const o = parseInt(u.get('open') || '0');
    if (o >= 1 && o <= last.length) await openDetail(last[o - 1]);
  }
})();
