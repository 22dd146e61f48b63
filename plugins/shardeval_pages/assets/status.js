// The live status page's script (shardeval status --serve), after "use strict" and four_decimals.js:
// polls status.json and draws the run or sweep; every string goes in as text, never as markup.
// Every string goes in as a text node or a property: never innerHTML.
function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k.startsWith("data-")) e.setAttribute(k, String(v)); else e[k] = v;
  }
  for (const c of kids) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
const text = (s) => el("bdi", {}, s);  // names may hold RTL marks: isolate them
const rate = (r) => (r ? r.toFixed(1) : "—");
const eta = (s) => (s === null || s === undefined ? "—" : s.toFixed(0) + "s");
const fmt = (x) => (x === null || x === undefined ? "—" : fourDecimals(x));  // as the text status rounds
const k = (key, value) => el("span", {"data-k": key}, value);
const bar = (done, total) => el("progress", {value: Math.min(done, total), max: Math.max(total, 1)});
const row = (key, cells) => el("tr", {"data-row": key}, ...cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c))));
const td = (cls, ...kids) => el("td", {className: cls}, ...kids);
const table = (heads, rows) => el("table", {}, el("tr", {}, ...heads.map((h, i) => el("th", {className: i ? "" : "l"}, h))), ...rows);
const state = (s) => el("span", {className: "s-" + s.replace(" ", "-"), "data-k": "state"}, s);
const errors = (n) => el("span", {className: n ? "err" : "", "data-k": "errors"}, n);
const counts = (x) => [bar(x.records, x.expected), el("span", {}, k("records", x.records), "/", k("expected", x.expected))];

function accuracy(b) {
  if (!b.value) return [k("metric", b.metric || "—"), ""];
  const v = b.value;
  return [el("span", {}, k("value", fmt(v.value)), " ", el("span", {className: "ci"}, "[", k("ci_low", fmt(v.ci_low)), ", ",
          k("ci_high", fmt(v.ci_high)), "]")), el("span", {className: "ci"}, k("ci_method", v.ci_method), " n=", k("n", v.n))];
}

// A reasoning model's answers cut off while thinking, counted apart (the benchmark's `reasoning`,
// present only where it has thinking or cut-off replies): "truncated while thinking: 3 of 40".
function thinking(b) {
  const r = b.reasoning;
  if (!r) return null;
  return el("span", {className: r.truncated_reasoning ? "warn" : "", "data-k": "reasoning"}, "truncated while thinking: ",
            k("truncated_reasoning", r.truncated_reasoning), " of ", k("n_answered", r.n_answered));
}

function shardTable(run, prefix) {
  const rows = run.shards.map((p) => row(prefix + "shard:" + p.idx + ":" + p.path, [
    td("l", k("idx", p.idx)), td("l", state(p.state)), ...counts(p), errors(p.errors), k("rate", rate(p.rate)),
    k("eta", eta(p.eta_s)), td("l", text(p.path))]));
  for (const m of run.missing) rows.push(row(prefix + "shard:" + m.idx + ":", [td("l", k("idx", m.idx)), td("l", state("not started")),
    "", "", "", "", "", td("l", text(m.where))]));
  return table(["shard", "state", "progress", "records", "errors", "req/s", "eta", "directory"], rows);
}

function notes(run, who) {
  const out = [];
  for (const p of run.shards) { if (p.note) out.push(who + p.note); for (const w of p.warnings) out.push(who + w); }
  for (const m of run.missing) if (who) out.push(who + "shard " + m.idx + " not started");
  for (const t of run.mixed) out.push(who + "warning: shards served by different models: " + t + " (merge refuses them)");
  for (const b of run.benchmarks) for (const t of b.problems) out.push(who + b.name + ": " + t);
  return out;
}

function total(done, all, suffix, ...more) {
  return el("p", {"data-row": "total"}, bar(done, all), " total: ", k("done", done), "/", k("total", all), " records (",
            all ? percent(done / all, 1) : "—", ")" + suffix, ...more);
}

function runView(run) {
  const reasoning = run.benchmarks.some((b) => b.reasoning);  // the column only where a benchmark thinks
  const benches = run.benchmarks.map((b) => row("bench:" + b.name, [td("l", text(b.name)), ...counts(b), errors(b.errors),
    ...accuracy(b), ...(reasoning ? [td("l", thinking(b))] : []), k("rate", rate(b.rate)), k("eta", eta(b.eta_s))]));
  return [total(run.done, run.total, ""),
          el("h2", {}, "benchmarks"), table(["benchmark", "progress", "records", "errors", "running accuracy [" + CONFIDENCE + " interval]", "method",
                                             ...(reasoning ? ["reasoning"] : []), "req/s", "eta"], benches),
          el("h2", {}, "shards"), shardTable(run, ""), notes(run, "")];
}

function sweepView(sw, open) {
  const names = [];
  for (const m of sw.models) if (m.run) for (const b of m.run.benchmarks) if (!names.includes(b.name)) names.push(b.name);
  const rows = sw.models.map((m) => {
    if (!m.run) return row("model:" + m.name, [td("l", text(m.name)), ...names.map(() => td("", state("not started"))), "—", "not started"]);
    const byName = Object.fromEntries(m.run.benchmarks.map((b) => [b.name, b]));
    const cells = names.map((n) => {
      const b = byName[n];
      if (!b) return td("", "—");
      const [value, method] = accuracy(b);
      return el("td", {"data-row": "grid:" + m.name + ":" + n, className: "l"}, counts(b)[0], " ", counts(b)[1], el("br"),
                "errors ", errors(b.errors), " · eta ", k("eta", eta(b.eta_s)), el("br"), value, el("br"), method,
                ...(b.reasoning ? [el("br"), thinking(b)] : []));
    });
    const summary = Object.entries(m.run.states).map(([s, n]) => n + " " + s).join(", ");
    const rate0 = m.run.benchmarks.length ? m.run.benchmarks[0].rate : null;
    return row("model:" + m.name, [td("l", text(m.name), m.name === sw.baseline ? " (baseline)" : ""), ...cells, rate(rate0), td("l", summary)]);
  });
  const details = sw.models.filter((m) => m.run).map((m) => el("details", {open: open.has(m.name), "data-model": m.name},
    el("summary", {}, "shards of ", text(m.name)), shardTable(m.run, m.name + ":")));
  const counted = sw.not_started ? ", " + sw.not_started + " model(s) not started counted at a started one's size" : "";
  return [total(sw.done, sw.total, " of the whole sweep" + counted + " · ", k("rate", rate(sw.rate)), " req/s · eta ",
                k("eta", eta(sw.eta_s))),
          el("p", {}, "sweep: " + sw.services.length + " models x " + sw.shards + " shard(s), baseline ", text(sw.baseline)),
          table(["model", ...names, "req/s", "shards"], rows), ...details,
          sw.models.flatMap((m) => (m.run ? notes(m.run, m.name + ": ") : []))];
}

let interval = 2, updates = 0, CONFIDENCE = "95%";
function show(doc) {
  const view = document.getElementById("view"), err = document.getElementById("error");
  document.getElementById("root").textContent = doc.root;
  err.hidden = !doc.error;
  err.textContent = doc.error || "";
  const when = new Date(doc.updated_at * 1000).toLocaleTimeString();
  document.getElementById("updated").textContent = "read at " + when + " in " + doc.compute_s.toFixed(2) + " s";
  if (doc.error) { view.classList.add("stale"); return; }
  view.classList.remove("stale");
  const open = new Set(Array.from(view.querySelectorAll("details[open]")).map((d) => d.dataset.model));
  const parts = doc.sweep ? sweepView(doc.sweep, open) : doc.run ? runView(doc.run) : [el("p", {}, doc.waiting || ""), []];
  const lines = parts.pop().concat(doc.extra);
  if (lines.length) parts.push(el("h2", {}, "notes"), el("ul", {className: "notes"}, ...lines.map((t) => el("li", {}, text(t)))));
  view.replaceChildren(...parts);
  document.body.dataset.updates = String(++updates);
}

async function poll() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    const doc = await r.json();
    interval = doc.interval_s || interval;
    CONFIDENCE = percent(doc.confidence, 0);
    show(doc);
  } catch (e) {
    const err = document.getElementById("error");
    err.hidden = false;
    err.textContent = "cannot read status.json from the server: " + e.message + " (retrying)";
    document.getElementById("view").classList.add("stale");
  }
  setTimeout(poll, interval * 1000);
}
poll();
