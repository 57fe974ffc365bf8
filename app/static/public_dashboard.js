// Read-only view of a publicly shared Tally dashboard. Plain DOM + SVG, no dependencies.
// Every value from the server is placed with textContent / attributes, never as HTML.
"use strict";
(function () {
  const COLORS = ["#3e7bfa", "#f0b429", "#27ab83", "#ef4e4e", "#9446ed", "#2bb0ed", "#f7764e", "#8d99ae"];
  const SVG = "http://www.w3.org/2000/svg";
  const W = 480, H = 200, PAD = { l: 40, r: 10, t: 10, b: 24 };
  const dataUrl = location.pathname.replace(/\/+$/, "") + "/data";

  // The page's CSP forbids inline style attributes; styles set through the CSSOM are allowed.
  function setAttr(node, k, v) {
    if (k === "style") node.style.cssText = String(v);
    else node.setAttribute(k, String(v));
  }
  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) setAttr(node, k, v);
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) setAttr(node, k, v);
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  const color = (i) => COLORS[i % COLORS.length];
  const fmt = (n) => Number(n).toLocaleString();
  function label(iso, interval) {
    const d = new Date(iso);
    return interval === "hour" ? d.toISOString().slice(11, 16) : d.toISOString().slice(5, 10);
  }

  function legend(series) {
    const box = el("div", { class: "legend" });
    series.forEach((s, i) => {
      const item = el("span");
      item.append(el("span", { class: "swatch", style: "background:" + color(i) }), document.createTextNode(s.name));
      box.append(item);
    });
    return box;
  }

  function axes(root, max, stamps, interval) {
    root.append(svg("line", { x1: PAD.l, y1: H - PAD.b, x2: W - PAD.r, y2: H - PAD.b, stroke: "#cbd2d9" }));
    root.append(svg("text", { x: PAD.l - 4, y: PAD.t + 8, "text-anchor": "end", class: "axis" }, fmt(max)));
    root.append(svg("text", { x: PAD.l - 4, y: H - PAD.b, "text-anchor": "end", class: "axis" }, "0"));
    const every = Math.max(1, Math.ceil(stamps.length / 6));
    stamps.forEach((t, i) => {
      if (i % every) return;
      const x = PAD.l + ((i + 0.5) * (W - PAD.l - PAD.r)) / stamps.length;
      root.append(svg("text", { x, y: H - 8, "text-anchor": "middle", class: "axis" }, label(t, interval)));
    });
  }

  function timeChart(chart, data) {
    const series = data.series;
    const stamps = series.length ? series[0].points.map((p) => p.timestamp) : [];
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": chart.title });
    const n = Math.max(1, stamps.length), plotW = W - PAD.l - PAD.r, plotH = H - PAD.t - PAD.b;
    const stacked = stamps.map((_, i) => series.reduce((sum, s) => sum + s.points[i].value, 0));
    const max = Math.max(1, ...(chart.type === "bar" ? stacked : series.flatMap((s) => s.points.map((p) => p.value))));
    const y = (v) => H - PAD.b - (v / max) * plotH;
    axes(root, max, stamps, data.interval);
    if (chart.type === "bar") {
      const base = stamps.map(() => 0), bw = Math.max(1, (plotW / n) * 0.7);
      series.forEach((s, si) => s.points.forEach((p, i) => {
        if (!p.value) return;
        const x = PAD.l + (i * plotW) / n + (plotW / n - bw) / 2;
        const top = y(base[i] + p.value), h = y(base[i]) - top;
        const rect = svg("rect", { x, y: top, width: bw, height: Math.max(h, 0.5), fill: color(si) });
        rect.append(svg("title", {}, `${s.name} · ${label(p.timestamp, data.interval)}: ${fmt(p.value)}`));
        root.append(rect);
        base[i] += p.value;
      }));
    } else {
      series.forEach((s, si) => {
        const pts = s.points.map((p, i) => `${PAD.l + ((i + 0.5) * plotW) / n},${y(p.value)}`).join(" ");
        root.append(svg("polyline", { points: pts, fill: "none", stroke: color(si), "stroke-width": 2 }));
      });
    }
    return [root, legend(series)];
  }

  function pieChart(chart, data) {
    const total = data.series.reduce((sum, s) => sum + s.points[0].value, 0);
    if (!total) return [el("div", { class: "empty" }, "No events in this range")];
    const root = svg("svg", { viewBox: "0 0 200 200", role: "img", "aria-label": chart.title, style: "max-width:220px" });
    let angle = -Math.PI / 2;
    data.series.forEach((s, i) => {
      const share = s.points[0].value / total, next = angle + share * 2 * Math.PI;
      const p = (a) => `${100 + 90 * Math.cos(a)},${100 + 90 * Math.sin(a)}`;
      const shape = share >= 0.9999
        ? svg("circle", { cx: 100, cy: 100, r: 90, fill: color(i) })
        : svg("path", { d: `M100,100 L${p(angle)} A90,90 0 ${share > 0.5 ? 1 : 0} 1 ${p(next)} Z`, fill: color(i) });
      shape.append(svg("title", {}, `${s.name}: ${fmt(s.points[0].value)} (${(share * 100).toFixed(1)}%)`));
      root.append(shape);
      angle = next;
    });
    return [root, legend(data.series)];
  }

  function tableChart(chart, data) {
    const table = el("table");
    const head = el("tr");
    head.append(el("th", {}, chart.group_by || "event"), el("th", { class: "num" }, "count"));
    table.append(head);
    data.series.forEach((s) => {
      const row = el("tr");
      row.append(el("td", {}, s.name), el("td", { class: "num" }, fmt(s.points[0].value)));
      table.append(row);
    });
    return [table];
  }

  function funnelChart(chart, data) {
    const first = data.series.length ? data.series[0].points[0].value : 0;
    return data.series.map((s, i) => {
      const value = s.points[0].value, pct = first ? (value / first) * 100 : 0;
      const step = el("div", { class: "step" });
      step.append(el("div", {}, `${i + 1}. ${s.name} — ${fmt(value)} users (${pct.toFixed(1)}%)`));
      step.append(el("div", { class: "bar", style: `width:${Math.max(pct, 0.5)}%` }));
      return step;
    });
  }

  const RENDER = { line: timeChart, bar: timeChart, pie: pieChart, table: tableChart, funnel: funnelChart };

  function render(body) {
    const d = body.dashboard;
    document.title = d.name + " · Tally";
    document.getElementById("name").textContent = d.name;
    document.getElementById("description").textContent = d.description || "";
    const byId = new Map(body.data.map((x) => [x.chart_id, x]));
    const grid = document.getElementById("charts");
    grid.replaceChildren();
    if (!d.charts.length) grid.append(el("div", { class: "empty" }, "This dashboard has no charts yet."));
    d.charts.forEach((chart) => {
      const card = el("section", { class: "card" });
      card.append(el("h2", {}, chart.title));
      card.append(...(RENDER[chart.type] || tableChart)(chart, byId.get(chart.id)));
      grid.append(card);
    });
    document.getElementById("status").textContent = `${body.from.slice(0, 16)} – ${body.to.slice(0, 16)} UTC`;
  }

  // Each load supersedes the ones before it: a slow answer for a range left behind (or the minute's refresh)
  // is dropped, not drawn under the range chosen since.
  let generation = 0;
  async function load() {
    const mine = ++generation;
    const [days, interval] = document.getElementById("range").value.split(":");
    const to = new Date(), from = new Date(to.getTime() - Number(days) * 86400000);
    const query = new URLSearchParams({ from: from.toISOString(), to: to.toISOString(), interval });
    const status = document.getElementById("status");
    const unreachable = "Can't reach the Tally server. Check your connection; the dashboard tries again every minute.";
    let resp, text;
    try {
      resp = await fetch(`${dataUrl}?${query}`, { headers: { Accept: "application/json" } });
      text = await resp.text();
    } catch (err) {
      // No answer at all: the browser's own words for it ("Failed to fetch") say nothing to a reader.
      if (mine === generation) status.textContent = unreachable;
      return;
    }
    if (mine !== generation) return;
    if (resp.status === 404) {
      document.getElementById("name").textContent = "Dashboard not found";
      document.getElementById("charts").replaceChildren();
      status.textContent = "This dashboard is no longer shared.";
      return;
    }
    // A proxy in front of a stopped server answers 502-504 with a page of its own: Tally was not reached.
    const json = /json/.test(resp.headers.get("Content-Type") || "");
    if (!resp.ok) {
      status.textContent = resp.status >= 502 && resp.status <= 504 && !json ? unreachable
        : "Could not load the dashboard (HTTP " + resp.status + "). Retrying shortly.";
      return;
    }
    try {
      render(JSON.parse(text));
    } catch (err) {
      status.textContent = "Could not load the dashboard (" + err.message + "). Retrying shortly.";
    }
  }

  document.getElementById("range").addEventListener("change", load);
  load();
  setInterval(load, 60000);
})();
