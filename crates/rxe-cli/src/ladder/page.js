// rxe ladder page: draws the model that `rxe ladder` embedded as JSON.
// Large captures: the ladder is a tall spacer with one small SVG inside;
// on every scroll (once per animation frame) the SVG is refilled with only
// the rows inside the viewport plus an overscan margin, found by binary
// search on the row positions. The DOM holds a few hundred elements
// whatever the capture's size.
"use strict";
(function () {
  const M = JSON.parse(document.getElementById("model").textContent);
  const P = M.pkts;
  const ROW = 24, SLOPE = 9, TOP = 14, GUTTER = 118, OVERSCAN = 400, MINLANE = 190;
  const COLORS = {
    "Ethernet": "#9ecae1", "802.1Q": "#c6dbef", "Linux SLL": "#9ecae1", "Linux SLL2": "#9ecae1",
    "IPv4": "#a1d99b", "IPv6": "#a1d99b", "UDP": "#fdd0a2", "LRH": "#a6bddb", "GRH": "#c7e9b4",
    "BTH": "#fc9272", "RDETH": "#d4b9da", "DETH": "#bcbddc", "XRCETH": "#d4b9da", "RETH": "#fdae6b",
    "AtomicETH": "#dadaeb", "AETH": "#fa9fb5", "AtomicAckETH": "#c994c7", "ImmDt": "#fee391",
    "IETH": "#d9f0a3", "FETH": "#e5d8bd", "Payload": "#e4e4e4", "Pad": "#bdbdbd", "ICRC": "#80cdc1",
    "VCRC": "#80cdc1",
  };
  const BADGE = { retx: "RETX", dup: "DUP", nak: "NAK", rnr: "RNR", gap: "GAP", error: "BAD", ecn: "ECN", repeatack: "REPEAT" };
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  const scroller = $("scroller"), spacer = $("spacer"), svg = $("ladder"), lanesDiv = $("lanes"), detail = $("detail");
  const byFrame = new Map();
  P.forEach((p, i) => byFrame.set(p.f, i));
  const S = { lane: -1, conn: -1, errors: false, cover: true, sel: -1 };
  let rows = [], yOf = new Float64Array(P.length).fill(-1), total = 0, laneW = MINLANE;

  function laneName(i) {
    const l = M.lanes[i];
    return l[0] + " qp " + (l[1] === null ? "?" : "0x" + l[1].toString(16));
  }
  // Columns: lanes grouped by address (in order of first appearance), the
  // last address's lanes mirrored so that a two-host capture puts the two
  // ends of each connection side by side in the middle.
  const col = (function () {
    const addrs = [];
    M.lanes.forEach((l) => { if (addrs.indexOf(l[0]) < 0) addrs.push(l[0]); });
    const order = [];
    addrs.forEach((a, ai) => {
      const g = [];
      M.lanes.forEach((l, i) => { if (l[0] === a) g.push(i); });
      if (ai === addrs.length - 1 && ai > 0) g.reverse();
      order.push.apply(order, g);
    });
    const c = new Array(M.lanes.length);
    order.forEach((lane, k) => { c[lane] = k; });
    return c;
  })();
  function laneX(i) { return GUTTER + laneW * (col[i] + 0.5); }
  function trouble(p) { return p.m.some((m) => m[2]); }
  function shown(p) {
    return (S.lane < 0 || p.s === S.lane || p.d === S.lane) && (S.conn < 0 || p.c === S.conn) && (!S.errors || trouble(p));
  }
  function fmtDt(dt) { return dt >= 1 ? dt.toFixed(3) + " s" : dt >= 1e-3 ? (dt * 1e3).toFixed(3) + " ms" : (dt * 1e6).toFixed(1) + " µs"; }

  // Time runs down. Each packet gets one row; the space between rows grows
  // with the logarithm of the time between them, so bursts stay dense and
  // pauses show; a pause much longer than usual is cut out and marked.
  function layout() {
    const idx = [];
    for (let i = 0; i < P.length; i++) if (shown(P[i])) idx.push(i);
    const dts = [];
    for (let j = 1; j < idx.length; j++) dts.push(P[idx[j]].t - P[idx[j - 1]].t);
    const sorted = dts.slice().sort((a, b) => a - b);
    const med = Math.max(sorted.length ? sorted[sorted.length >> 1] : 1e-6, 1e-6);
    const cut = Math.max(1e-3, 40 * med);
    rows = []; yOf.fill(-1);
    let y = TOP + 44;
    for (let j = 0; j < idx.length; j++) {
      if (j > 0) {
        const dt = dts[j - 1];
        if (dt > cut) { rows.push({ gap: dt, y: y + 4 }); y += 26; }
        else y += Math.min(16, Math.round(5 * Math.log10(1 + dt / med)));
      }
      rows.push({ i: idx[j], y });
      yOf[idx[j]] = y;
      y += ROW;
    }
    total = y + 60;
    const width = Math.max(scroller.clientWidth, 600);
    laneW = Math.max(MINLANE, (width - GUTTER - 20) / Math.max(M.lanes.length, 1));
    const w = GUTTER + laneW * M.lanes.length + 20;
    spacer.style.height = total + "px"; spacer.style.width = w + "px";
    svg.setAttribute("width", w);
    lanesDiv.style.width = w + "px";
    let h = '<div class="tscale" title="time since the first frame, and the frame number; rows are spaced by the log of the time between packets; a long pause is cut out and marked ≋">time ↓<br>ms · frame</div>';
    M.lanes.forEach((l, i) => { h += '<div data-lane="' + i + '" class="' + (S.lane === i ? "on" : "") + '" style="left:' + laneX(i) + 'px">' + esc(laneName(i)) + "</div>"; });
    lanesDiv.innerHTML = h;
    $("count").textContent = idx.length + " of " + P.length + " packets shown";
  }

  function lowerBound(y) {
    let lo = 0, hi = rows.length;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (rows[mid].y < y) lo = mid + 1; else hi = mid; }
    return lo;
  }

  function badges(p) {
    let s = "", seen = {};
    for (const m of p.m) { if (seen[m[0]]) continue; seen[m[0]] = 1; s += '<tspan class="badge b-' + m[0] + '" dx="6">' + BADGE[m[0]] + "</tspan>"; }
    return s;
  }

  function arrow(i, y) {
    const p = P[i];
    let x1 = laneX(p.s), x2 = laneX(p.d);
    const cls = ["pk", "k-" + p.k].concat(p.m.map((m) => "m-" + m[0]));
    if (i === S.sel) cls.push("sel");
    if (S.sel >= 0 && related(S.sel, i)) cls.push("rel");
    if (x1 === x2) x2 = x1 + 40;
    const y2 = y + SLOPE, dir = x2 > x1 ? 1 : -1;
    const ax = x2 - dir * 7;
    const mid = (x1 + x2) / 2;
    return '<g class="' + cls.join(" ") + '" data-frame="' + p.f + '" data-i="' + i + '">' +
      '<text class="time" x="4" y="' + (y + 4) + '">' + (p.t * 1e3).toFixed(3) + " ms #" + p.f + "</text>" +
      '<line class="a" x1="' + x1 + '" y1="' + y + '" x2="' + ax + '" y2="' + (y2 - SLOPE * 7 / Math.abs(x2 - x1)) + '"/>' +
      '<polygon points="' + x2 + "," + y2 + " " + ax + "," + (y2 - 4) + " " + ax + "," + (y2 + 3) + '"/>' +
      '<line class="hit" x1="' + x1 + '" y1="' + y + '" x2="' + x2 + '" y2="' + y2 + '"/>' +
      '<text class="l" text-anchor="middle" x="' + mid + '" y="' + (y - 3) + '">' + esc(p.l) + badges(p) + "</text></g>";
  }

  function related(sel, i) {
    const s = P[sel], p = P[i];
    if (s.r === p.f || p.r === s.f) return true;
    return !!(s.cv && s.cv[2].indexOf(p.f) >= 0);
  }

  // Coverage brackets: at the requester's lane, from the first to the last
  // request packet a response acknowledges.
  function bracket(i) {
    const p = P[i];
    if (!p.cv || !S.cover) return "";
    const fr = p.cv[2].map((f) => byFrame.get(f)).filter((j) => j !== undefined && yOf[j] >= 0);
    if (!fr.length) return "";
    const y1 = yOf[fr[0]], y2 = yOf[fr[fr.length - 1]] + SLOPE, ya = yOf[i] + SLOPE;
    const x = laneX(p.d) - 10 - (i % 3) * 4;
    const c = p.k === "nak" || p.k === "rnr" ? "cover nakc" : "cover";
    return '<path class="' + c + '" d="M' + (x + 5) + "," + y1 + " H" + x + " V" + y2 + " H" + (x + 5) + '"><title>acknowledges PSN ' + p.cv[0] + ".." + p.cv[1] + " (" + p.cv[2].length + " packets)</title></path>" +
      '<line class="coverlink" x1="' + x + '" y1="' + (y1 + y2) / 2 + '" x2="' + laneX(p.d) + '" y2="' + ya + '"/>';
  }

  let queued = false, drawMs = [];
  function draw() {
    queued = false;
    const t0 = performance.now();
    const top = scroller.scrollTop, h = scroller.clientHeight;
    const y0 = Math.max(0, top - OVERSCAN), y1 = top + h + OVERSCAN;
    const a = lowerBound(y0), b = lowerBound(y1);
    const parts = [];
    for (let i = 0; i < M.lanes.length; i++) parts.push('<line class="lane" x1="' + laneX(i) + '" y1="' + y0 + '" x2="' + laneX(i) + '" y2="' + Math.min(y1, total) + '"/>');
    // Responses come after their requests: look a little past the window
    // for brackets that reach back into it.
    const far = Math.min(rows.length, b + 400);
    for (let r = a; r < far; r++) {
      const row = rows[r];
      if (row.gap === undefined && P[row.i].cv) {
        if (r < b) parts.push(bracket(row.i));
        else {
          const f0 = byFrame.get(P[row.i].cv[2][0]);
          if (f0 !== undefined && yOf[f0] >= 0 && yOf[f0] < y1) parts.push(bracket(row.i));
        }
      }
    }
    for (let r = a; r < b; r++) {
      const row = rows[r];
      if (row.gap !== undefined) {
        const w = GUTTER + laneW * M.lanes.length;
        let z = "M" + GUTTER + "," + row.y;
        for (let x = GUTTER; x < w; x += 12) z += " L" + (x + 6) + "," + (row.y + 5) + " L" + (x + 12) + "," + row.y;
        parts.push('<path class="gapline" d="' + z + '"/><text class="gap" x="4" y="' + (row.y + 8) + '">≋ ' + fmtDt(row.gap) + " cut</text>");
      } else parts.push(arrow(row.i, row.y));
    }
    svg.style.top = "0px";
    svg.setAttribute("height", Math.min(y1, total));
    svg.innerHTML = parts.join("");
    drawMs.push(performance.now() - t0);
  }
  function schedule() { if (!queued) { queued = true; requestAnimationFrame(draw); } }

  // ---- byte map -------------------------------------------------------
  function bytesOf(b) {
    const out = new Array(b.len).fill(null);
    for (let k = 0; k < b.head.length / 2; k++) out[k] = parseInt(b.head.substr(2 * k, 2), 16);
    for (let k = 0; k < b.tail.length / 2; k++) out[b.tail_at + k] = parseInt(b.tail.substr(2 * k, 2), 16);
    return out;
  }
  function readBits(bytes, bit, width) {
    let v = 0n;
    for (let k = 0; k < width; k++) {
      const at = bit + k, byte = bytes[at >> 3];
      if (byte === null || byte === undefined) return null;
      v = (v << 1n) | BigInt((byte >> (7 - (at & 7))) & 1);
    }
    return v;
  }
  function bitString(v, width) {
    if (width > 16) return "0x" + v.toString(16).padStart(Math.ceil(width / 4), "0");
    return v.toString(2).padStart(width, "0");
  }

  function select(i, scrollTo) {
    S.sel = i;
    const p = P[i];
    if (scrollTo && yOf[i] >= 0) scroller.scrollTop = Math.max(0, yOf[i] - scroller.clientHeight / 3);
    draw();
    let h = "<h2>frame " + p.f + " · " + esc(p.l) + "</h2>";
    h += '<div class="sum">' + esc(p.b ? p.b.summary : "") + "</div>";
    h += "<div>" + esc(laneName(p.s)) + " → " + esc(laneName(p.d)) + " at " + (p.t * 1e3).toFixed(3) + " ms</div>";
    if (p.m.length) h += "<ul>" + p.m.map((m) => '<li class="' + (m[2] ? "trouble" : "") + '" data-mark="' + m[0] + '">' + esc(m[1]) + "</li>").join("") + "</ul>";
    if (p.r !== null && p.r !== undefined) h += '<div>related: <a data-go="' + p.r + '">frame ' + p.r + "</a></div>";
    if (p.cv) h += "<div>acknowledges PSN " + p.cv[0] + ".." + p.cv[1] + ": " + p.cv[2].slice(0, 40).map((f) => '<a data-go="' + f + '">' + f + "</a>").join(", ") + (p.cv[2].length > 40 ? " …" : "") + "</div>";
    if (p.b) h += byteMap(p.b);
    else h += '<p class="bad">This frame is on its way to being RoCE but its outer headers do not parse: no byte map.</p>';
    detail.innerHTML = h;
  }

  function byteMap(b) {
    const bytes = bytesOf(b);
    const owner = new Array(b.len).fill(-1);
    b.regions.forEach((r, ri) => { for (let k = r[1]; k < r[1] + r[2] && k < b.len; k++) owner[k] = ri; });
    const masked = {};
    if (b.icrc) b.icrc.masks.forEach((m) => { masked[m[0]] = m; });
    let h = "<h3>Byte map (" + b.len + " bytes)</h3><div class=\"legend\">";
    b.regions.forEach((r) => { h += '<span style="background:' + (COLORS[r[0]] || "#ff8a8a") + '">' + esc(r[0]) + " @" + r[1] + " · " + r[2] + " B</span>"; });
    h += '<span class="byte masked" style="outline:1px dashed #555">masked for the ICRC</span></div><div id="grid">';
    let skipped = false;
    for (let row = 0; row < b.len; row += 16) {
      let any = false;
      for (let k = row; k < row + 16 && k < b.len; k++) if (bytes[k] !== null) any = true;
      if (!any) { if (!skipped) h += '<div class="elided">… bytes ' + (b.head.length / 2) + ".." + (b.tail_at - 1) + " of the payload are not embedded …</div>"; skipped = true; continue; }
      h += '<div class="row"><span class="off">' + row.toString(16).padStart(4, "0") + "</span>";
      for (let k = row; k < row + 16 && k < b.len; k++) {
        const r = owner[k] >= 0 ? b.regions[owner[k]] : null;
        const col = r ? COLORS[r[0]] || "#ff8a8a" : "#fff";
        const m = masked[k];
        const title = (r ? r[0] + " +" + (k - r[1]) : "") + " @" + k + (m ? " — masked: " + m[2] : "");
        h += '<span class="byte' + (m ? " masked" : "") + '" data-at="' + k + '" style="background-color:' + col + '" title="' + esc(title) + '">' + (bytes[k] === null ? "··" : bytes[k].toString(16).padStart(2, "0")) + "</span>";
      }
      h += "</div>";
    }
    h += "</div>";
    b.regions.forEach((r) => {
      if (r[3] < 0) return;
      const sc = M.schemas[r[3]];
      h += "<h3><span class=\"legend\"><span style=\"background:" + (COLORS[r[0]] || "#ddd") + '">' + esc(r[0]) + "</span></span> @" + r[1] + ", " + r[2] + ' bytes</h3><table class="fields" data-layer="' + esc(r[0]) + '"><tr><th>field</th><th>bits</th><th>raw</th><th>value</th><th>meaning</th></tr>';
      sc.fields.forEach((f, fi) => {
        const v = readBits(bytes, r[1] * 8 + f[1], f[2]);
        const meaning = r[4][fi] !== undefined ? esc(r[4][fi]) : '<span class="hint">' + esc(f[3]) + "</span>";
        h += '<tr class="' + (f[4] ? "resv" : "") + '" data-layer="' + esc(r[0]) + '" data-field="' + esc(f[0]) + '" data-bit="' + (r[1] * 8 + f[1]) + '" data-width="' + f[2] + '"><td>' + esc(f[0]) + '</td><td class="bits">' + f[1] + "+" + f[2] + '</td><td class="bits">' + (v === null ? "—" : bitString(v, f[2])) + '</td><td class="v">' + (v === null ? "—" : f[2] > 32 ? "" : v.toString()) + "</td><td>" + meaning + "</td></tr>";
      });
      h += "</table>";
    });
    if (b.icrc) {
      const ok = b.icrc.verdict === "verified";
      h += '<h3>ICRC</h3><div id="icrc">carried ' + b.icrc.carried + ': <span class="' + (ok ? "ok" : "bad") + '">' + esc(b.icrc.verdict) + "</span><br>covers bytes " + b.icrc.from + ".." + (b.icrc.to - 1) + " of the frame: " + esc(b.icrc.note) + ".<ul>" +
        b.icrc.masks.map((m) => "<li>byte " + m[0] + " mask 0x" + m[1].toString(16).padStart(2, "0") + ": " + esc(m[2]) + "</li>").join("") + "</ul>";
      if (b.icrc.vcrc) h += "VCRC: " + esc(b.icrc.vcrc);
      h += "</div>";
    }
    return h;
  }

  // ---- controls ---------------------------------------------------------
  function fillControls() {
    const fl = $("f-lane"), fc = $("f-conn");
    M.lanes.forEach((l, i) => { const o = document.createElement("option"); o.value = i; o.textContent = laneName(i); fl.appendChild(o); });
    M.conns.forEach((c, i) => { const o = document.createElement("option"); o.value = i; o.textContent = c[2] + " " + laneName(c[0]) + " ⇄ " + laneName(c[1]); fc.appendChild(o); });
    fl.onchange = () => { S.lane = +fl.value; relayout(); };
    fc.onchange = () => { S.conn = +fc.value; relayout(); };
    $("f-err").onchange = (e) => { S.errors = e.target.checked; relayout(); };
    $("f-cover").onchange = (e) => { S.cover = e.target.checked; draw(); };
    const s = M.summary;
    let h = "<table><tr><th>RoCE packets</th><td>" + s.packets + " (" + M.other + " other frames)</td></tr><tr><th>messages</th><td>" + s.messages + "</td></tr><tr><th>payload bytes</th><td>" + s.bytes + "</td></tr><tr><th>retransmissions</th><td>" + s.retransmissions + "</td></tr><tr><th>duplicates</th><td>" + s.duplicates + "</td></tr><tr><th>bad packets</th><td>" + s.bad + "</td></tr><tr><th>CM MADs</th><td>" + s.cm + "</td></tr>";
    const naks = Object.entries(s.naks);
    h += "<tr><th>NAKs</th><td>" + (naks.length ? naks.map((e) => esc(e[0]) + ": " + e[1]).join("<br>") : "none") + "</td></tr></table>";
    if (s.rtt.length) {
      h += "<p>RTT, request to first response (retransmitted requests left out):</p><table><tr><th>requests</th><th>samples</th><th>min</th><th>median</th><th>max</th></tr>";
      s.rtt.forEach((r) => { const c = M.conns[r.conn]; h += "<tr><td>" + esc(c[2] + " " + laneName(r.from) + " → " + laneName(r.to)) + "</td><td>" + r.samples + "</td><td>" + fmtDt(r.min) + "</td><td>" + fmtDt(r.median) + "</td><td>" + fmtDt(r.max) + "</td></tr>"; });
      h += "</table>";
    }
    $("summary-body").innerHTML = h;
  }
  function relayout() { layout(); if (S.sel >= 0 && yOf[S.sel] < 0) S.sel = -1; draw(); }

  svg.addEventListener("click", (e) => { const g = e.target.closest("g.pk"); if (g) select(+g.dataset.i, false); });
  detail.addEventListener("click", (e) => { const a = e.target.closest("a[data-go]"); if (a && byFrame.has(+a.dataset.go)) select(byFrame.get(+a.dataset.go), true); });
  detail.addEventListener("mouseover", (e) => {
    detail.querySelectorAll(".byte.hl").forEach((x) => x.classList.remove("hl"));
    const tr = e.target.closest("tr[data-bit]");
    if (!tr) return;
    const b0 = +tr.dataset.bit, w = +tr.dataset.width;
    for (let k = b0 >> 3; k <= (b0 + w - 1) >> 3; k++) { const x = detail.querySelector('.byte[data-at="' + k + '"]'); if (x) x.classList.add("hl"); }
  });
  lanesDiv.addEventListener("click", (e) => { const d = e.target.closest("div[data-lane]"); if (!d) return; const i = +d.dataset.lane; S.lane = S.lane === i ? -1 : i; $("f-lane").value = S.lane; relayout(); });
  scroller.addEventListener("scroll", schedule, { passive: true });
  window.addEventListener("resize", () => { layout(); draw(); });

  fillControls();
  layout();
  draw();

  // ---- self-test (#selftest or #selftest=FRAME) -----------------------
  // Walks the whole ladder window by window and records what the DOM shows,
  // then clicks one packet and records its byte map, for the browser test.
  function selftest(clickFrame) {
    const res = { packets: P.length, seen: 0, missing: [], marks: {}, maxNodes: 0, clicked: null, resources: 0 };
    const seen = new Set();
    drawMs = [];
    for (let top = 0; top < total; top += Math.max(200, scroller.clientHeight)) {
      scroller.scrollTop = top;
      draw();
      res.maxNodes = Math.max(res.maxNodes, svg.getElementsByTagName("*").length);
      svg.querySelectorAll("g.pk").forEach((g) => {
        const f = +g.dataset.frame;
        seen.add(f);
        g.classList.forEach((c) => { if (c.startsWith("m-")) { const k = c.slice(2); (res.marks[k] = res.marks[k] || []); if (res.marks[k].indexOf(f) < 0) res.marks[k].push(f); } });
      });
    }
    P.forEach((p) => { if (!seen.has(p.f)) res.missing.push(p.f); });
    res.seen = seen.size;
    const ds = drawMs.slice().sort((a, b) => a - b);
    res.drawMedianMs = ds[ds.length >> 1]; res.drawMaxMs = ds[ds.length - 1];
    const i = byFrame.has(clickFrame) ? byFrame.get(clickFrame) : 0;
    scroller.scrollTop = Math.max(0, yOf[i] - 100);
    draw();
    const g = svg.querySelector('g.pk[data-frame="' + P[i].f + '"]');
    if (g) {
      g.querySelector("line.hit").dispatchEvent(new MouseEvent("click", { bubbles: true }));
      const fields = {};
      detail.querySelectorAll('tr[data-layer="BTH"]').forEach((tr) => { fields[tr.dataset.field] = tr.querySelector("td.v").textContent; });
      res.clicked = { frame: P[i].f, bth: fields, bytes: detail.querySelectorAll("#grid .byte").length, regions: detail.querySelectorAll(".legend span").length, icrc: (detail.querySelector("#icrc .ok, #icrc .bad") || {}).textContent || null };
    }
    res.resources = performance.getEntriesByType("resource").length;
    const out = $("selftest");
    out.textContent = JSON.stringify(res);
    out.hidden = false;
    out.setAttribute("data-done", "1");
  }
  const hash = location.hash.slice(1);
  const st = /^selftest(?:=(\d+))?$/.exec(hash);
  if (st && P.length) selftest(st[1] ? +st[1] : P[0].f);
  // #frame=N selects frame N; #frame=N&show=BTH also scrolls its byte map
  // to that header (for pictures in the docs).
  const fr = /^frame=(\d+)(?:&show=([\w.]+))?$/.exec(hash);
  if (fr && byFrame.has(+fr[1])) {
    select(byFrame.get(+fr[1]), true);
    const t = fr[2] && detail.querySelector('table[data-layer="' + fr[2] + '"]');
    if (t) detail.scrollTop = t.offsetTop - detail.offsetTop - 40;
  }
})();
