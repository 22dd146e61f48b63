// The saved pages' script (report.html, sweep.html, compare.html), after four_decimals.js and the
// pinned Vega bundle. Charts are drawn one at a time: those in view (or about to be) first, then the
// rest while the page is idle. Each chart's div says data-state="drawn"; the body says
// data-charts="drawn" when every chart is. A chart whose data is a named dataset gets that dataset's
// rows as objects of its own (Vega marks the objects it reads). Then the paged tables.
(function () {
  // The charts' tooltips format their numbers by the one rule (charts.py's formatType "decimals").
  (window.vega || vegaEmbed.vega).expressionFunction('decimals', function (v, digits) {
    return typeof v === 'number' && isFinite(v) ? decimals(v, Number(digits)) : String(v);
  });
  var specs = JSON.parse(document.getElementById('chart-specs').textContent);
  var dataEl = document.getElementById('page-data');
  var page = dataEl ? JSON.parse(dataEl.textContent) : {datasets: {}, tables: {}};
  var objects = {};
  function records(name) {
    if (!objects[name]) {
      var set = page.datasets[name];
      objects[name] = set.rows.map(function (row) {
        var o = {};
        set.fields.forEach(function (f, i) { o[f] = row[i]; });
        return o;
      });
    }
    return objects[name];
  }
  function withData(spec) {
    var name = spec.data && spec.data.name;
    if (!name || !page.datasets[name]) return spec;
    var copy = Object.assign({}, spec);
    copy.datasets = {};
    copy.datasets[name] = records(name).map(function (o) { return Object.assign({}, o); });
    return copy;
  }
  var order = Object.keys(specs), pending = new Set(order), inView = new Set(), busy = false, failed = [];
  function settle() {
    if (pending.size || busy) return;
    document.body.dataset.charts = failed.length ? 'failed' : 'drawn';
  }
  function pick() {
    for (var i = 0; i < order.length; i++) if (inView.has(order[i]) && pending.has(order[i])) return order[i];
    return pending.size ? order.find(function (id) { return pending.has(id); }) : null;
  }
  function drawNext() {
    if (busy) return;
    var id = pick();
    if (id === null) return settle();
    pending.delete(id);
    busy = true;
    var el = document.getElementById(id);
    vegaEmbed(el, withData(specs[id]), {renderer: 'svg', actions: false}).then(
      function () { el.dataset.state = 'drawn'; },
      function (err) { el.dataset.state = 'failed'; failed.push(id); console.error('chart ' + id + ' failed: ' + err); }
    ).then(function () {
      busy = false;
      // yield to the browser between charts: a scroll is seen before the next one is picked
      if (pick() !== null && !Array.from(inView).some(function (v) { return pending.has(v); }) && window.requestIdleCallback) {
        requestIdleCallback(drawNext, {timeout: 200});
      } else {
        setTimeout(drawNext, 0);
      }
    });
  }
  var watch = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) { if (e.isIntersecting) inView.add(e.target.id); else inView.delete(e.target.id); });
    drawNext();
  }, {rootMargin: '400px 0px'});
  order.forEach(function (id) { watch.observe(document.getElementById(id)); });
  if (!order.length) settle();

  // Paged tables: a dataset's rows, filtered by the box, a page at a time. Every number cell
  // carries its exact value in data-value and its key in data-key, as the static tables do.
  function fmt(v, kind) {
    if (v === null || v === undefined) return '\u2014';
    if (kind === 'num') return fourDecimals(v);
    if (kind === 'p') return v < 0.0001 ? '<0.0001' : fourDecimals(v);
    return String(v);
  }
  function cell(tr, row, c, key) {
    var td = tr.insertCell();
    var v = row[c.field];
    if (c.kind === 'text') {
      td.textContent = v === null || v === undefined ? '\u2014' : String(v);
    } else {
      td.className = 'num';
      td.dataset.key = key + '/' + c.field;
      td.dataset.value = JSON.stringify(v === undefined ? null : v);
      td.textContent = c.shown ? row[c.shown] : fmt(v, c.kind);
    }
    if (c.partial && row[c.partial] === false) td.classList.add('partial');
    if (c.cls) td.classList.add(c.cls);
  }
  function matches(row, fields, text) {
    return !text || fields.some(function (f) { return String(row[f]).toLowerCase().indexOf(text) >= 0; });
  }
  function pagedTable(id, spec) {
    var box = document.getElementById(id), input = box.querySelector('input.filter'), pager = box.querySelector('.pager');
    var body = box.querySelector('tbody');
    var all = records(spec.data).filter(function (r) {
      return Object.keys(spec.where || {}).every(function (f) { return r[f] === spec.where[f]; });
    });
    var lines;  // each line: [label, rows...]
    if (spec.rows) {
      var byRow = new Map(spec.rows.order.map(function (v) { return [v, new Map()]; }));
      all.forEach(function (r) { if (byRow.has(r[spec.rows.field])) byRow.get(r[spec.rows.field]).set(r[spec.cols.field], r); });
      lines = Array.from(byRow, function (kv) { return {label: kv[0], cells: kv[1]}; });
    } else {
      lines = all.map(function (r) { return {row: r}; });
    }
    var start = 0, shown = lines;
    function draw() {
      body.textContent = '';
      shown.slice(start, start + spec.page).forEach(function (line) {
        var tr = body.insertRow();
        if (spec.rows) {
          tr.insertCell().textContent = line.label;
          spec.cols.order.forEach(function (col) {
            var r = line.cells.get(col);
            if (!r) { var td = tr.insertCell(); td.className = 'muted'; td.colSpan = spec.cells.length; td.textContent = '\u2014'; return; }
            spec.cells.forEach(function (c) { cell(tr, r, c, [spec.key, line.label, col].join('/')); });
          });
        } else {
          var key = [spec.key].concat(spec.keys.map(function (f) { return line.row[f]; })).join('/');
          spec.cells.forEach(function (c) { cell(tr, line.row, c, key); });
        }
      });
      pager.textContent = '';
      var end = Math.min(start + spec.page, shown.length);
      var say = document.createElement('span');
      say.className = 'muted';
      say.textContent = shown.length ? (start + 1) + '\u2013' + end + ' of ' + shown.length + ' rows' : 'no row matches';
      if (shown.length > spec.page) {
        [['\u2039 previous', 'prev', Math.max(0, start - spec.page), start === 0],
         ['next \u203a', 'next', start + spec.page, end >= shown.length]].forEach(function (b) {
          var button = document.createElement('button');
          button.type = 'button'; button.textContent = b[0]; button.className = b[1]; button.disabled = b[3];
          button.addEventListener('click', function () { start = b[2]; draw(); });
          pager.appendChild(button);
          pager.appendChild(document.createTextNode(' '));
        });
      }
      pager.appendChild(say);
    }
    input.addEventListener('input', function () {
      var text = input.value.trim().toLowerCase();
      shown = lines.filter(function (line) {
        return spec.rows ? String(line.label).toLowerCase().indexOf(text) >= 0 : matches(line.row, spec.search, text);
      });
      start = 0;
      draw();
    });
    draw();
  }
  Object.keys(page.tables).forEach(function (id) { pagedTable(id, page.tables[id]); });
  function openTarget() {  // a link to an item opens its folded <details>
    var el = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el && el.tagName === 'DETAILS') { el.open = true; el.scrollIntoView(); }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
})();