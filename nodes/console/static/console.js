// delayq console: times in the viewer's zone, local date inputs, confirmations, and the charts
// (drawn by uPlot, data from /ui/api/series). No inline script: the page's CSP forbids it.
"use strict";
(function () {
  function span(ms) {
    ms = Math.abs(ms);
    if (ms < 1000) return Math.round(ms) + " ms";
    var s = ms / 1000;
    if (s < 10) return s.toFixed(1) + " s";
    if (s < 60) return Math.round(s) + " s";
    if (s < 3600) return Math.round(s / 60) + " min";
    if (s < 86400) return Math.round(s / 3600) + " h";
    return Math.round(s / 86400) + " d";
  }
  function relative(at) {
    var d = at - Date.now();
    if (Math.abs(d) < 1000) return "now";
    return d > 0 ? "in " + span(d) : span(d) + " ago";
  }
  function localize(root) {
    (root || document).querySelectorAll("time[data-ms]").forEach(function (t) {
      var at = Number(t.dataset.ms);
      t.textContent = relative(at);
      t.title = new Date(at).toLocaleString();
    });
  }
  function pad(n) { return String(n).padStart(2, "0"); }
  function localInput(ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes());
  }
  function forms() {
    document.querySelectorAll("form[data-local-times]").forEach(function (f) {
      f.querySelectorAll("input[data-ms-field]").forEach(function (input) {
        var hidden = f.querySelector("input[name='" + input.dataset.msField + "']");
        if (hidden && hidden.value) input.value = localInput(Number(hidden.value));
      });
      f.addEventListener("submit", function () {
        f.querySelectorAll("input[data-ms-field]").forEach(function (input) {
          var hidden = f.querySelector("input[name='" + input.dataset.msField + "']");
          if (hidden) hidden.value = input.value ? String(new Date(input.value).getTime()) : "";
        });
      });
    });
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) {
        if (!window.confirm(f.dataset.confirm)) e.preventDefault();
      });
    });
  }
  function width(el) { return Math.max(280, el.clientWidth || 600); }
  function chart(el) {
    var kind = el.dataset.kind, plot = null;
    var series = kind === "rate"
      ? [{}, {label: "fires/s", stroke: "#2563eb", fill: "rgba(37,99,235,0.1)", value: function (u, v) { return v == null ? "–" : v.toLocaleString(); }}]
      : [{}, {label: "p50", stroke: "#16a34a", value: function (u, v) { return v == null ? "–" : span(v); }},
             {label: "p99", stroke: "#dc2626", value: function (u, v) { return v == null ? "–" : span(v); }}];
    var axes = [{}, {values: function (u, vals) { return vals.map(function (v) { return kind === "rate" ? v.toLocaleString() : span(v); }); }}];
    function draw() {
      // Marked as the page refreshing itself: it does not keep an idle session alive.
      fetch(el.dataset.series, {credentials: "same-origin", headers: {"X-Delayq-Poll": "1"}}).then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      }).then(function (d) {
        var data = kind === "rate" ? [d.t, d.rate]
          : [d.t, d.p50.map(function (v) { return v == null ? null : v * 1000; }), d.p99.map(function (v) { return v == null ? null : v * 1000; })];
        el.dataset.points = String(d.t.length);
        var note = el.parentNode.querySelector(".chart-note");
        if (!note) { note = document.createElement("p"); note.className = "hint chart-note"; el.parentNode.appendChild(note); }
        note.textContent = d.t.length ? ("from " + d.answered + " of " + d.asked + " nodes") :
          "No data yet: the nodes keep 10 s slots from their start; fires show here within 10 seconds.";
        if (plot) { plot.setData(data); return; }
        plot = new uPlot({width: width(el), height: 220, series: series, axes: axes, scales: {x: {time: true}}}, data, el);
        window.addEventListener("resize", function () { plot.setSize({width: width(el), height: 220}); });
      }).catch(function (e) { el.textContent = "Could not load the chart: " + e.message + ". It retries in 10 s."; plot = null; });
    }
    draw();
    setInterval(draw, 10000);
  }
  function load(el) {
    var doc = JSON.parse(document.getElementById("load-data").textContent);
    var colors = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];
    var series = [{}].concat(doc.series.map(function (s, i) {
      return {label: s.topic, stroke: colors[i % 8], fill: colors[i % 8] + "22", paths: uPlot.paths.bars({size: [0.8]})};
    }));
    var data = [doc.t].concat(doc.series.map(function (s) { return s.values; }));
    var plot = new uPlot({width: width(el), height: 260, series: series, scales: {x: {time: true}}}, data, el);
    window.addEventListener("resize", function () { plot.setSize({width: width(el), height: 260}); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    localize();
    forms();
    if (window.uPlot) {
      document.querySelectorAll(".chart[data-series]").forEach(chart);
      document.querySelectorAll(".chart[data-load]").forEach(load);
    }
    setInterval(localize, 5000);
    document.body.addEventListener("htmx:afterSwap", function (e) { localize(e.target); });
  });
})();
