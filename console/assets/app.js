// The console's page: a single page with hash routes, plain JavaScript, no build step.
// It reads the JSON API under ./api/ (docs/console.md) and draws every view with DOM calls
// (markup is never parsed from data: labels and messages come from users' queries).
'use strict';

(() => {
  const API = new URL('api/', document.baseURI);
  const PER_PAGE = 100;
  const STAGES = ['queue_wait', 'fetch', 'preprocess', 'vision', 'prefill', 'decode', 'upload'];
  const main = document.getElementById('main');

  // session: whether this browser may act, and the CSRF token its POSTs must carry.
  const session = { actions: false, csrf: '' };
  // Each render gets a generation number; a late answer for an older view is dropped, and
  // the view's refresh timer stops when the view changes.
  let generation = 0;
  let timer = 0;

  // h builds an element: h('a', {href: '#/x', 'data-testid': 'y'}, 'text', child...).
  function h(tag, attrs, ...children) {
    const el = tag.startsWith('svg:')
      ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.setAttribute('class', v);
      // through the CSSOM, which a Content-Security-Policy without 'unsafe-inline' allows
      else if (k === 'style') el.style.cssText = v;
      else if (k in el && !(el instanceof SVGElement) && typeof v !== 'string') el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  async function api(path, opts) {
    const init = { credentials: 'same-origin', headers: {} };
    if (opts && opts.body !== undefined) {
      init.method = 'POST';
      init.headers['Content-Type'] = 'application/json';
      if (session.csrf) init.headers['X-CSRF-Token'] = session.csrf;
      init.body = JSON.stringify(opts.body);
    }
    const resp = await fetch(new URL(path, API), init);
    let data = null;
    try { data = await resp.json(); } catch (_) { /* not JSON */ }
    if (!resp.ok) {
      const err = new Error((data && data.error) || `${resp.status} ${resp.statusText}`);
      err.status = resp.status;
      throw err;
    }
    return data || {};
  }

  function qs(params) {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== '' && v !== undefined && v !== null) u.set(k, v);
    const s = u.toString();
    return s ? '?' + s : '';
  }

  const fmtNum = (n, d = 0) => (n === undefined || n === null || Number.isNaN(n)) ? '–' : Number(n).toFixed(d);
  const fmtTime = (t) => t ? new Date(t).toLocaleString() : '–';
  const boxOf = (d) => d.bbox || d.box || [0, 0, 0, 0];

  function ago(t) {
    if (!t) return '–';
    const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    return `${Math.round(s / 3600)} h ago`;
  }

  function toast(text, bad) {
    const el = document.getElementById('toast');
    el.textContent = text;
    el.className = bad ? 'toast bad' : 'toast';
    el.hidden = false;
    clearTimeout(toast.t);
    toast.t = setTimeout(() => { el.hidden = true; }, 6000);
  }

  // ---- routing ----

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, '');
    const [path, query] = raw.split('?');
    const parts = path.split('/').map(decodeURIComponent);
    return { name: parts[0] || 'overview', arg: parts.slice(1).join('/'), params: new URLSearchParams(query || '') };
  }

  const views = { overview: viewOverview, batches: viewBatches, batch: viewGallery, job: viewJob, failures: viewFailures };

  function route() {
    clearInterval(timer);
    timer = 0;
    const r = parseHash();
    const view = views[r.name];
    for (const a of document.querySelectorAll('header nav a')) {
      const cur = a.dataset.route === r.name || (a.dataset.route === 'batches' && r.name === 'batch');
      if (cur) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    const gen = ++generation;
    if (!view) {
      main.replaceChildren(h('h1', {}, 'Not found'), h('p', {}, 'No such page. ', h('a', { href: '#/overview' }, 'Overview')));
      return;
    }
    main.dataset.view = r.name;
    main.dataset.ready = 'false';
    view(r, gen);
  }

  // render replaces the view's content unless a newer view has started.
  function render(gen, ...nodes) {
    if (gen !== generation) return false;
    main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
    main.dataset.ready = 'true';
    return true;
  }

  function failView(gen, err) {
    render(gen, h('h1', {}, 'Could not load'), h('p', { class: 'error', 'data-testid': 'view-error' }, err.message));
  }

  // every refreshes a view while it is the one shown and the tab is visible.
  function every(ms, fn) {
    timer = setInterval(() => { if (document.visibilityState === 'visible') fn(); }, ms);
  }

  // ---- overview ----

  function sparkline(values) {
    const w = 90, hgt = 22;
    const vs = (values || []).map(Number);
    if (vs.length < 2) return h('span', { class: 'muted' }, '–');
    const max = Math.max(1, ...vs);
    const pts = vs.map((v, i) => `${(i / (vs.length - 1)) * w},${hgt - 1 - (v / max) * (hgt - 2)}`).join(' ');
    return h('svg:svg', { class: 'spark', width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`, role: 'img', 'aria-label': `trend: ${vs.join(', ')}` },
      h('svg:polyline', { points: pts }));
  }

  function stat(testid, value, key) {
    return h('div', { class: 'tile-stat' }, h('div', { class: 'v', 'data-testid': testid }, value), h('div', { class: 'k' }, key));
  }

  async function viewOverview(r, gen) {
    const load = async () => {
      let o;
      try { o = await api('overview'); } catch (e) { return failView(gen, e); }
      const queue = o.queue || [], workers = o.workers || [], errors = o.errors || [];
      const pending = queue.reduce((s, q) => s + (q.pending || 0), 0);
      render(gen,
        h('h1', {}, 'Overview'),
        h('div', { class: 'tiles' },
          stat('stat-pending', pending, 'jobs queued'),
          stat('stat-in-flight', o.in_flight ?? 0, 'jobs in flight'),
          stat('stat-succeeded-rate', fmtNum(o.succeeded_per_min, 1), 'succeeded per minute'),
          stat('stat-failed-rate', fmtNum(o.failed_per_min, 1), 'failed per minute'),
          stat('stat-workers', workers.length, 'live workers')),
        h('h2', {}, 'Queue by class'),
        queue.length ? h('table', { 'data-testid': 'queue-table' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Class'), h('th', { class: 'num' }, 'Pending'), h('th', {}, 'Trend'))),
          h('tbody', {}, queue.map((q) => h('tr', { 'data-testid': 'queue-row', 'data-class': q.class },
            h('td', {}, q.class), h('td', { class: 'num', 'data-testid': 'queue-pending' }, q.pending ?? 0), h('td', {}, sparkline(q.trend))))))
          : h('p', { class: 'muted' }, 'No queued jobs.'),
        h('h2', {}, 'Workers'),
        workers.length ? h('table', { 'data-testid': 'workers-table' },
          h('thead', {}, h('tr', {}, ['Worker', 'Chip', 'Engine', 'Model', 'Batch occupancy', 'Last seen'].map((t) => h('th', {}, t)))),
          h('tbody', {}, workers.map((w) => h('tr', { 'data-testid': 'worker-row', 'data-worker': w.id },
            h('td', {}, w.id), h('td', {}, w.chip ?? '–'), h('td', {}, w.engine || '–'), h('td', {}, w.model || '–'),
            h('td', {}, w.batch_occupancy === undefined ? '–' : `${fmtNum(w.batch_occupancy * 100)} %`),
            h('td', { title: fmtTime(w.last_seen) }, ago(w.last_seen))))))
          : h('p', { class: 'muted' }, 'No live worker.'),
        h('h2', {}, 'Recent errors by code'),
        errors.length ? h('table', { 'data-testid': 'errors-table' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Code'), h('th', { class: 'num' }, 'Jobs'), h('th', {}, ''))),
          h('tbody', {}, errors.map((e) => h('tr', { 'data-testid': 'error-row', 'data-code': e.code },
            h('td', {}, h('code', {}, e.code)), h('td', { class: 'num', 'data-testid': 'error-count' }, e.count),
            h('td', {}, h('a', { href: '#/failures' + qs({ code: e.code }) }, 'failures'))))))
          : h('p', { class: 'muted', 'data-testid': 'no-errors' }, 'No errors.'));
    };
    await load();
    every(5000, load);
  }

  // ---- batches ----

  const STATES = ['succeeded', 'failed', 'pending', 'canceled'];

  function progress(b) {
    const total = Math.max(1, b.total || 0);
    return h('div', {},
      h('div', { class: 'progress', role: 'img', 'aria-label': STATES.map((s) => `${b[s] || 0} ${s}`).join(', ') },
        STATES.map((s) => h('span', { class: s, style: `width:${(100 * (b[s] || 0)) / total}%` }))),
      h('div', { class: 'legend' }, STATES.map((s, i) => [i ? ' · ' : '', h('span', { 'data-testid': `batch-${s}` }, b[s] || 0), ` ${s}`])));
  }

  function labelCounts(labels) {
    const entries = Object.entries(labels || {}).sort((a, b) => b[1] - a[1]);
    if (!entries.length) return h('span', { class: 'muted' }, '–');
    return h('span', { 'data-testid': 'batch-labels' }, entries.slice(0, 6).map(([l, n], i) => [i ? ', ' : '', `${l}: ${n}`]),
      entries.length > 6 ? ` (+${entries.length - 6})` : '');
  }

  async function viewBatches(r, gen) {
    const load = async () => {
      let d;
      try { d = await api('batches'); } catch (e) { return failView(gen, e); }
      const batches = d.batches || [];
      render(gen, h('h1', {}, 'Batches'),
        batches.length ? h('table', { 'data-testid': 'batches-table' },
          h('thead', {}, h('tr', {}, ['Batch', 'Progress', 'Total', 'Started', 'Finished', 'Jobs/s', 'Labels', ''].map((t) => h('th', {}, t)))),
          h('tbody', {}, batches.map((b) => h('tr', { 'data-testid': 'batch-row', 'data-batch': b.batch },
            h('td', {}, h('a', { href: '#/batch/' + encodeURIComponent(b.batch), 'data-testid': 'batch-link' }, b.batch)),
            h('td', {}, progress(b)),
            h('td', { class: 'num', 'data-testid': 'batch-total' }, b.total ?? 0),
            h('td', {}, fmtTime(b.started_at)), h('td', {}, b.finished_at ? fmtTime(b.finished_at) : h('span', { class: 'muted' }, 'running')),
            h('td', { class: 'num' }, fmtNum(b.jobs_per_s, 2)), h('td', {}, labelCounts(b.labels)),
            h('td', {}, b.pending > 0 ? h('button', { type: 'button', 'data-testid': 'batch-cancel',
              onclick: () => act('cancel', { batch: b.batch }, `Cancel the ${b.pending} pending job(s) of batch ${b.batch}?`, load) }, 'Cancel pending…') : null)))))
          : h('p', { class: 'muted' }, 'No batch yet.'));
    };
    await load();
    every(5000, load);
  }

  // ---- gallery ----

  // boxesSVG draws detections over a picture of width w and height h (the original's
  // pixels: the SVG's viewBox, so the boxes scale with the picture). ghost boxes are
  // invisible until hovered or focused: the picture is an overlay that has them drawn.
  function boxesSVG(dets, w, hgt, opts) {
    const o = opts || {};
    const svg = h('svg:svg', { class: 'boxes', viewBox: `0 0 ${w} ${hgt}`, preserveAspectRatio: 'none', 'aria-hidden': o.focusable ? null : 'true' });
    dets.forEach((d, i) => {
      const [x0, y0, x1, y1] = boxOf(d);
      const rect = h('svg:rect', {
        x: x0, y: y0, width: Math.max(0, x1 - x0), height: Math.max(0, y1 - y0),
        class: o.ghost ? 'ghost' : null, 'data-testid': o.testid || null, 'data-index': i,
        'data-label': d.label, 'data-score': d.score, tabindex: o.focusable ? 0 : null,
        'aria-label': o.focusable ? `${d.label} ${fmtNum(d.score, 2)}` : null,
      }, h('svg:title', {}, `${d.label} ${fmtNum(d.score, 2)}`));
      svg.append(rect);
    });
    // points (the answer of a pointing task) as small rings, sized to the picture
    (o.points || []).forEach((p, i) => {
      const [x, y] = p.point || [0, 0];
      svg.append(h('svg:circle', { cx: x, cy: y, r: Math.max(w, hgt) / 60, class: o.ghost ? 'ghost' : null,
        'data-testid': 'point', 'data-index': i, 'data-label': p.label, 'data-score': p.score },
      h('svg:title', {}, `${p.label} ${fmtNum(p.score, 2)}`)));
    });
    return svg;
  }

  // boxLabels writes each box's label and score above its corner, in page pixels (an SVG
  // text would scale with the picture), positioned in percent of the picture's size.
  function boxLabels(dets, w, hgt) {
    return h('div', { class: 'box-labels', 'aria-hidden': 'true' }, dets.map((d) => {
      const [x0, y0] = boxOf(d);
      return h('span', { style: `left:${(100 * x0) / w}%;top:${(100 * y0) / hgt}%` }, `${d.label} ${fmtNum(d.score, 2)}`);
    }));
  }

  // picture is an image of a result with its boxes: the <img> loads lazily, the frame keeps
  // the image's aspect ratio so the page does not jump while it loads.
  function picture(src, item, opts) {
    const w = item.width || 0, hgt = item.height || 0;
    let style = w && hgt ? `aspect-ratio:${w}/${hgt}` : 'aspect-ratio:4/3';
    if (w && hgt && opts.maxHeight) style += `;max-width:calc(${opts.maxHeight} * ${w / hgt})`;
    const frame = h('div', { class: 'pic', style });
    let outer = frame;
    if (opts.box && w && hgt) {
      // a thumbnail fits a 4:3 box, centred, whatever its own shape, so tiles line up
      const r = (w / hgt) / (4 / 3);
      frame.style.cssText = r >= 1 ? `width:100%;height:${100 / r}%` : `height:100%;width:${100 * r}%`;
      outer = h('div', { class: 'thumbbox' }, frame);
    }
    if (!src) { frame.append(h('div', { class: 'noimg' }, 'no picture')); return outer; }
    const img = h('img', { src, alt: opts.alt || '', loading: opts.lazy ? 'lazy' : null, decoding: 'async', width: w || null, height: hgt || null, 'data-testid': opts.testid });
    let tries = 0;
    img.addEventListener('error', () => {
      // a gallery thumbnail not made yet (503: thumbnails wait while the worker is busy)
      // comes later: ask again a few times, Retry-After apart, before giving up on it
      if (opts.lazy && tries < 6) {
        tries++;
        setTimeout(() => { if (img.isConnected) img.src = src + (src.includes('?') ? '&' : '?') + 'try=' + tries; }, 5000);
        return;
      }
      img.replaceWith(h('div', { class: 'noimg' }, 'picture unavailable'));
    });
    // an overlay with a legend is taller than the image, as wide (engine/overlay puts the
    // legend in a margin below the picture): once it loads, the frame takes its shape, and
    // the boxes, in the image's pixels, keep to the picture at its top
    img.addEventListener('load', () => {
      if (!w || !hgt || !img.naturalWidth || !outer.isConnected) return;
      const tall = Math.round((img.naturalHeight * w) / img.naturalWidth);
      if (tall > hgt + 1) outer.replaceWith(picture(src, { ...item, height: tall }, opts));
    });
    frame.append(img);
    const dets = item.detections || (item.result && item.result.detections) || [];
    const points = item.points || [];
    if (w && hgt && (dets.length || points.length) && (opts.always || !item.overlay)) {
      frame.append(boxesSVG(dets, w, hgt, { ...opts.boxes, points }));
      if (opts.boxes && opts.boxes.labels && !opts.boxes.ghost) frame.append(boxLabels(dets, w, hgt));
    }
    return outer;
  }

  function bestDetection(item) {
    const dets = item.detections || [];
    if (!dets.length) return null;
    return dets.reduce((a, b) => (b.score > a.score ? b : a));
  }

  async function viewGallery(r, gen) {
    const batch = r.arg;
    const f = {
      label: r.params.get('label') || '', min_score: r.params.get('min_score') || '',
      status: r.params.get('status') || '', code: r.params.get('code') || '', page: Number(r.params.get('page')) || 1,
    };
    let known = { labels: [], codes: [] };
    let seq = 0;

    const heading = h('h1', {}, 'Batch ', h('span', { 'data-testid': 'gallery-batch' }, batch));
    const total = h('span', { 'data-testid': 'gallery-total' }, '…');
    const grid = h('div', { class: 'gallery', 'data-testid': 'gallery' });
    const pageInfo = h('span', { 'data-testid': 'gallery-page' });
    const prev = h('button', { type: 'button', 'data-testid': 'page-prev', onclick: () => { f.page--; apply(); } }, '← Previous');
    const next = h('button', { type: 'button', 'data-testid': 'page-next', onclick: () => { f.page++; apply(); } }, 'Next →');

    const labelSel = h('select', { id: 'f-label', 'data-testid': 'filter-label' });
    const scoreIn = h('input', { id: 'f-score', type: 'number', min: '0', max: '1', step: 'any', placeholder: '0', value: f.min_score, 'data-testid': 'filter-min-score' });
    const statusSel = h('select', { id: 'f-status', 'data-testid': 'filter-status' },
      ['', 'succeeded', 'failed', 'canceled'].map((s) => h('option', { value: s }, s || 'any')));
    const codeSel = h('select', { id: 'f-code', 'data-testid': 'filter-code' });
    statusSel.value = f.status;

    const fillSelect = (sel, values, cur, anyText) => {
      const all = [...new Set([...(values || []), ...(cur ? [cur] : [])])].sort();
      sel.replaceChildren(h('option', { value: '' }, anyText), ...all.map((v) => h('option', { value: v }, v)));
      sel.value = cur;
    };
    fillSelect(labelSel, [], f.label, 'any label');
    fillSelect(codeSel, [], f.code, 'any code');

    const filters = h('form', { class: 'filters panel', 'data-testid': 'filters', onsubmit: (e) => e.preventDefault() },
      h('label', { for: 'f-label' }, 'Label', labelSel),
      h('label', { for: 'f-score' }, 'Min score', scoreIn),
      h('label', { for: 'f-status' }, 'Status', statusSel),
      h('label', { for: 'f-code' }, 'Error code', codeSel),
      h('div', {}, total, ' results'),
      h('button', { type: 'button', 'data-testid': 'cancel-batch', onclick: () => act('cancel', { batch }, `Cancel every pending job of batch ${batch}?`, () => apply()) }, 'Cancel batch…'));

    // Filters apply as they change (debounced for typing); the hash keeps them, so a
    // filtered gallery is a link, without adding a history entry per keystroke.
    let debounce = 0;
    const changed = () => {
      f.label = labelSel.value; f.min_score = scoreIn.value.trim(); f.status = statusSel.value; f.code = codeSel.value; f.page = 1;
      clearTimeout(debounce);
      debounce = setTimeout(apply, 200);
    };
    for (const el of [labelSel, statusSel, codeSel]) el.addEventListener('change', changed);
    scoreIn.addEventListener('input', changed);

    async function apply() {
      const hash = '#/batch/' + encodeURIComponent(batch) + qs({ label: f.label, min_score: f.min_score, status: f.status, code: f.code, page: f.page > 1 ? f.page : '' });
      if (location.hash !== hash) history.replaceState(null, '', hash);
      const mine = ++seq;
      main.dataset.ready = 'false';
      let d;
      try {
        d = await api(`batches/${encodeURIComponent(batch)}/results` + qs({ label: f.label, min_score: f.min_score, status: f.status, code: f.code, page: f.page, per_page: PER_PAGE }));
      } catch (e) {
        if (mine === seq && gen === generation) { grid.replaceChildren(h('p', { class: 'error', 'data-testid': 'view-error' }, e.message)); main.dataset.ready = 'true'; }
        return;
      }
      if (mine !== seq || gen !== generation) return; // a newer filter or view won
      known = { labels: d.labels || known.labels, codes: d.codes || known.codes };
      if (document.activeElement !== labelSel) fillSelect(labelSel, known.labels, f.label, 'any label');
      if (document.activeElement !== codeSel) fillSelect(codeSel, known.codes, f.code, 'any code');
      const items = d.items || [];
      const pages = Math.max(1, Math.ceil((d.total || 0) / (d.per_page || PER_PAGE)));
      total.textContent = d.total ?? items.length;
      pageInfo.textContent = `page ${d.page || f.page} of ${pages}`;
      prev.disabled = f.page <= 1;
      next.disabled = f.page >= pages;
      grid.replaceChildren(...items.map(tile));
      if (!items.length) grid.append(h('p', { class: 'muted', 'data-testid': 'gallery-empty' }, 'Nothing matches these filters.'));
      main.dataset.ready = 'true';
    }

    function tile(item) {
      const best = bestDetection(item);
      const thumb = item.thumb || (item.picture ? item.picture + '?size=thumb' : '');
      return h('a', { class: 'item', href: '#/job/' + encodeURIComponent(item.id), 'data-testid': 'gallery-item', 'data-id': item.id, 'data-status': item.status },
        picture(thumb, item, { lazy: true, box: true, alt: `${item.id}: ${(item.detections || []).length} boxes`, boxes: {} }),
        h('div', { class: 'cap' }, h('span', { class: 'id mono', title: item.id }, item.id), h('span', { class: `badge ${item.status}` }, item.status)),
        h('div', { class: 'det' }, item.code ? h('code', {}, item.code)
          : best ? `${(item.detections || []).length} × · best ${best.label} ${fmtNum(best.score, 2)}` : 'no box'));
    }

    render(gen, heading, h('p', {}, h('a', { href: '#/batches' }, '← all batches'), ' · ', h('a', { href: '#/failures' + qs({ batch }) }, 'failures of this batch')),
      filters, grid, h('div', { class: 'pager' }, prev, pageInfo, next));
    await apply();
  }

  // ---- one job ----

  function waterfall(t) {
    const times = STAGES.map((s) => Math.max(0, Number((t || {})[s]) || 0));
    const sum = times.reduce((a, b) => a + b, 0) || 1;
    let at = 0;
    return h('div', { class: 'waterfall', 'data-testid': 'waterfall' }, STAGES.map((s, i) => {
      const left = (100 * at) / sum, width = (100 * times[i]) / sum;
      at += times[i];
      return [h('span', {}, s.replace('_', ' ')),
        h('div', { class: 'track', role: 'img', 'aria-label': `${s} ${fmtNum(times[i], 1)} ms` },
          h('div', { class: 'bar', style: `left:${left}%;width:${width}%` })),
        h('span', { class: 'num mono', 'data-testid': `timing-${s}` }, `${fmtNum(times[i], 1)} ms`)];
    }), t && t.total !== undefined ? [h('strong', {}, 'total'), h('span'), h('span', { class: 'num mono', 'data-testid': 'timing-total' }, `${fmtNum(t.total, 1)} ms`)] : null);
  }

  function jsonBlock(testid, value) {
    return h('pre', { class: 'json', 'data-testid': testid, tabindex: 0 }, JSON.stringify(value, null, 2));
  }

  async function viewJob(r, gen) {
    const id = r.arg;
    let d;
    try { d = await api('jobs/' + encodeURIComponent(id)); } catch (e) {
      return render(gen, h('h1', {}, 'Job ', h('span', { class: 'mono' }, id)),
        h('p', { class: 'error', 'data-testid': 'view-error' }, e.status === 404 ? 'No job with this id.' : e.message));
    }
    const res = d.result || null;
    const status = (res && res.status) || (d.state && d.state.status) || (d.job ? 'pending' : 'unknown');
    const batch = d.batch || (res && res.batch) || (d.job && d.job.batch) || '';
    const dets = (res && res.detections) || [];
    const points = (res && res.points) || [];
    const pic = { width: res && res.width, height: res && res.height, detections: dets, points, overlay: !!d.overlay };
    const code = (res && res.error && res.error.code) || (d.dead_letter && d.dead_letter.error && d.dead_letter.error.code) || '';

    const actions = h('div', { class: 'toolbar' });
    if (status === 'failed' || status === 'canceled' || status === 'expired' || d.dead_letter) {
      actions.append(h('button', { type: 'button', 'data-testid': 'job-replay', onclick: () => act('replay', { ids: [id] }, `Replay job ${id}?`, route) }, 'Replay…'));
    }
    if (status === 'pending' || status === 'queued' || status === 'running') {
      actions.append(h('button', { type: 'button', 'data-testid': 'job-cancel', onclick: () => act('cancel', { ids: [id] }, `Cancel job ${id}?`, route) }, 'Cancel…'));
    }

    render(gen,
      h('h1', {}, 'Job ', h('span', { class: 'mono', 'data-testid': 'job-id' }, id), ' ', h('span', { class: `badge ${status}`, 'data-testid': 'job-status' }, status)),
      h('p', {}, batch ? ['batch ', h('a', { href: '#/batch/' + encodeURIComponent(batch), 'data-testid': 'job-batch' }, batch)] : null,
        code ? [' · error ', h('code', { 'data-testid': 'job-code' }, code)] : null),
      actions,
      h('div', { class: 'detail' },
        h('div', {},
          res && res.width ? picture(d.picture, pic, { alt: `job ${id}`, always: true, maxHeight: '75vh', testid: 'job-picture', boxes: { labels: true, focusable: true, testid: 'box', ghost: !!d.overlay } })
            : h('p', { class: 'muted' }, 'No picture: the job has not produced a result with an image.'),
          h('h2', {}, 'Detections'),
          dets.length ? h('table', { 'data-testid': 'detections-table' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Label'), h('th', { class: 'num' }, 'Score'), h('th', {}, 'Box (x0, y0, x1, y1)'))),
            h('tbody', {}, dets.map((x) => h('tr', { 'data-testid': 'detection-row' }, h('td', {}, x.label),
              h('td', { class: 'num' }, fmtNum(x.score, 3)), h('td', { class: 'mono' }, boxOf(x).map((v) => fmtNum(v, 1)).join(', '))))))
            : h('p', { class: 'muted' }, points.length ? 'No box.' : 'No detection.'),
          points.length ? [h('h2', {}, 'Points'), h('table', { 'data-testid': 'points-table' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Label'), h('th', { class: 'num' }, 'Score'), h('th', {}, 'Point (x, y)'))),
            h('tbody', {}, points.map((p) => h('tr', { 'data-testid': 'point-row' }, h('td', {}, p.label),
              h('td', { class: 'num' }, fmtNum(p.score, 3)), h('td', { class: 'mono' }, (p.point || []).map((v) => fmtNum(v, 1)).join(', '))))))] : null),
        h('div', {},
          h('h2', {}, 'Facts'),
          h('dl', { class: 'kv' },
            h('dt', {}, 'Attempts'), h('dd', { 'data-testid': 'job-attempts' }, d.attempts ?? (res && res.attempt) ?? '–'),
            h('dt', {}, 'Query'), h('dd', {}, (res && res.query) || (d.job && d.job.query) || '–'),
            h('dt', {}, 'Worker'), h('dd', {}, (res && res.worker) || '–'),
            h('dt', {}, 'Model'), h('dd', {}, (res && res.model) || '–'),
            d.queued ? [h('dt', {}, 'In the queue'), h('dd', { 'data-testid': 'job-queued' },
              `since ${fmtTime(d.queued.published_at)} (${d.queued.subject}, sequence ${d.queued.sequence})`)] : null,
            h('dt', {}, 'Finished'), h('dd', {}, res ? fmtTime(res.finished_at) : '–'),
            res && res.error ? [h('dt', {}, 'Error'), h('dd', { class: 'error', 'data-testid': 'job-error' }, res.error.message)] : null),
          h('h2', {}, 'Timing'),
          waterfall(d.timing_ms || (res && res.timing_ms)),
          h('h2', {}, 'Dead-letter record'),
          d.dead_letter ? jsonBlock('dead-letter', d.dead_letter) : h('p', { class: 'muted', 'data-testid': 'no-dead-letter' }, 'None.'),
          h('h2', {}, 'Result JSON'),
          res ? jsonBlock('result-json', res) : h('p', { class: 'muted' }, 'No result yet.'),
          d.job ? [h('h2', {}, 'Job JSON'), jsonBlock('job-json', d.job)] : null)));
    if (status === 'pending' || status === 'queued' || status === 'running') every(3000, () => { if (!document.querySelector('dialog[open]')) route(); });
  }

  // ---- failures ----

  async function viewFailures(r, gen) {
    const batch = r.params.get('batch') || '', code = r.params.get('code') || '';
    let d;
    try { d = await api('failures' + qs({ batch, code })); } catch (e) { return failView(gen, e); }
    const groups = d.groups || [], items = d.items || [];
    const selected = new Set();
    const count = h('span', { 'data-testid': 'selected-count' }, '0');
    const replayBtn = h('button', { type: 'button', disabled: true, 'data-testid': 'replay-selected', onclick: () => act('replay', { ids: [...selected] }, `Replay ${selected.size} job(s)?`, route) }, 'Replay selected…');
    const cancelBtn = h('button', { type: 'button', disabled: true, 'data-testid': 'cancel-selected', onclick: () => act('cancel', { ids: [...selected] }, `Cancel ${selected.size} job(s)?`, route) }, 'Cancel selected…');
    const boxes = [];
    const sync = () => {
      count.textContent = selected.size;
      replayBtn.disabled = cancelBtn.disabled = selected.size === 0;
      for (const b of boxes) b.checked = selected.has(b.value);
      all.checked = items.length > 0 && selected.size === items.length;
    };
    const all = h('input', { type: 'checkbox', 'aria-label': 'select all', 'data-testid': 'select-all', onchange: () => {
      selected.clear();
      if (all.checked) for (const it of items) selected.add(it.id);
      sync();
    } });
    const selectGroup = (g) => {
      selected.clear();
      for (const it of items) if (it.code === g.code && it.batch === g.batch) selected.add(it.id);
      sync();
    };

    const filterNote = batch || code ? h('p', {}, 'Showing ', batch ? ['batch ', h('strong', {}, batch), ' '] : null, code ? ['code ', h('code', {}, code), ' '] : null,
      '· ', h('a', { href: '#/failures' }, 'show all')) : null;

    render(gen, h('h1', {}, 'Failures'), filterNote,
      h('h2', {}, 'By code and batch'),
      groups.length ? h('table', { 'data-testid': 'failure-groups' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Code'), h('th', {}, 'Batch'), h('th', { class: 'num' }, 'Jobs'), h('th', {}, ''))),
        h('tbody', {}, groups.map((g) => h('tr', { 'data-testid': 'failure-group', 'data-code': g.code, 'data-batch': g.batch },
          h('td', {}, h('a', { href: '#/failures' + qs({ code: g.code }) }, h('code', {}, g.code))),
          h('td', {}, h('a', { href: '#/failures' + qs({ batch: g.batch }) }, g.batch)),
          h('td', { class: 'num', 'data-testid': 'failure-group-count' }, g.count),
          h('td', {}, h('button', { type: 'button', 'data-testid': 'select-group', onclick: () => selectGroup(g) }, 'Select'), ' ',
            h('button', { type: 'button', 'data-testid': 'replay-batch', onclick: () => act('replay', { batch: g.batch }, `Replay every failed job of batch ${g.batch}?`, route) }, 'Replay batch…'))))))
        : h('p', { class: 'muted', 'data-testid': 'no-failures' }, 'No failure.'),
      h('h2', {}, 'Dead-letter records'),
      h('div', { class: 'toolbar' }, replayBtn, cancelBtn, h('span', { class: 'muted' }, count, ' selected')),
      items.length ? h('table', { 'data-testid': 'failure-items' },
        h('thead', {}, h('tr', {}, h('th', {}, all), ['Job', 'Batch', 'Code', 'Message', 'At'].map((t) => h('th', {}, t)))),
        h('tbody', {}, items.map((it) => {
          const cb = h('input', { type: 'checkbox', value: it.id, 'aria-label': `select ${it.id}`, 'data-testid': 'failure-check', onchange: () => {
            if (cb.checked) selected.add(it.id); else selected.delete(it.id);
            sync();
          } });
          boxes.push(cb);
          return h('tr', { 'data-testid': 'failure-item', 'data-id': it.id, 'data-code': it.code, 'data-batch': it.batch },
            h('td', {}, cb), h('td', { class: 'mono' }, h('a', { href: '#/job/' + encodeURIComponent(it.id) }, it.id)),
            h('td', {}, it.batch), h('td', {}, h('code', {}, it.code)), h('td', {}, it.message), h('td', {}, fmtTime(it.at)));
        })))
        : null);
  }

  // ---- actions: sign-in, confirmation, POST ----

  async function refreshSession() {
    try {
      const s = await api('session');
      session.actions = !!s.actions;
      session.csrf = s.csrf || '';
    } catch (_) {
      session.actions = false;
    }
    drawSession();
  }

  function drawSession() {
    const el = document.getElementById('session');
    el.replaceChildren(session.actions
      ? h('span', { 'data-testid': 'signed-in' }, 'Signed in: actions enabled')
      : h('button', { type: 'button', 'data-testid': 'signin-open', onclick: () => signIn() }, 'Sign in to act'));
  }

  // signIn asks for the token and opens a session; it resolves true once signed in.
  function signIn() {
    const dlg = document.getElementById('signin');
    const form = document.getElementById('signin-form');
    const input = document.getElementById('signin-token');
    const errEl = document.getElementById('signin-error');
    errEl.textContent = '';
    input.value = '';
    return new Promise((resolve) => {
      const done = (ok) => {
        form.onsubmit = null;
        document.getElementById('signin-cancel').onclick = null;
        dlg.onclose = null;
        if (dlg.open) dlg.close();
        resolve(ok);
      };
      form.onsubmit = async (e) => {
        e.preventDefault();
        try {
          const s = await api('session', { body: { token: input.value } });
          session.actions = true;
          session.csrf = s.csrf || '';
          input.value = '';
          drawSession();
          done(true);
        } catch (err) {
          errEl.textContent = err.status === 401 ? 'Wrong token.' : err.message;
          input.focus();
        }
      };
      document.getElementById('signin-cancel').onclick = () => done(false);
      dlg.onclose = () => resolve(false);
      dlg.showModal();
      input.focus();
    });
  }

  function confirmAction(text) {
    const dlg = document.getElementById('confirm');
    document.getElementById('confirm-text').textContent = text;
    return new Promise((resolve) => {
      dlg.returnValue = '';
      dlg.onclose = () => { dlg.onclose = null; resolve(dlg.returnValue === 'ok'); };
      dlg.showModal();
      dlg.querySelector('[value=cancel]').focus(); // the safe choice has the focus
    });
  }

  // act signs in when needed, asks for confirmation, POSTs and says what happened.
  async function act(kind, body, question, after) {
    if (!session.actions && !(await signIn())) return;
    if (!(await confirmAction(question))) return;
    try {
      const res = await api(kind, { body });
      if (kind === 'replay') {
        const skipped = res.skipped || [];
        toast(`Replayed ${res.replayed ?? 0}` + (skipped.length ? `, skipped ${skipped.length}: ${skipped.map((s) => `${s.id} (${s.reason})`).join('; ')}` : ''));
      } else {
        toast(`Canceled ${res.canceled ?? 0}`);
      }
      if (after) after();
    } catch (err) {
      if (err.status === 401 || err.status === 403) {
        session.actions = false;
        drawSession();
      }
      toast(`${kind} failed: ${err.message}`, true);
    }
  }

  // ---- start ----

  document.getElementById('lookup').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = document.getElementById('lookup-id').value.trim();
    if (id) location.hash = '#/job/' + encodeURIComponent(id);
  });
  window.addEventListener('hashchange', () => { route(); main.focus({ preventScroll: true }); });
  if (!location.hash) history.replaceState(null, '', '#/overview');
  drawSession();
  refreshSession();
  route();
})();
