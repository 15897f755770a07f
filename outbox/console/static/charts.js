// The overview's charts: one JSON fetch of the sampled series per sample period, drawn
// with uPlot (vendored). No sample is taken for a page: the console samples on its own.
(function () {
  "use strict";
  var box = document.getElementById("charts");
  if (!box || typeof uPlot === "undefined") { return; }
  var every = Math.max(1, parseFloat(box.dataset.every || "5")) * 1000;
  var specs = [
    ["chart-throughput", [["relayed_per_s", "relayed rows/s", "#1f5fbf"],
                          ["messages_per_s", "broker messages/s", "#d98a00"]]],
    ["chart-latency", [["latency_p50", "median s", "#1e7b34"], ["latency_max", "worst s", "#b3261e"]]],
    ["chart-backlog", [["backlog", "backlog", "#1f5fbf"], ["parked", "parked", "#b3261e"]]],
    ["chart-halves", [["pending_halves", "pending halves", "#6b3fa0"]]]
  ];
  var plots = {};

  function width(el) { return Math.max(300, el.clientWidth - 4); }

  function draw(series) {
    specs.forEach(function (spec) {
      var el = document.getElementById(spec[0]);
      if (!el) { return; }
      var data = [series.at || []].concat(spec[1].map(function (s) { return series[s[0]] || []; }));
      if (plots[spec[0]]) { plots[spec[0]].setData(data); return; }
      var opts = {
        width: width(el), height: 190,
        series: [{}].concat(spec[1].map(function (s) {
          return { label: s[1], stroke: s[2], width: 2, spanGaps: false };
        })),
        axes: [{}, { size: 60 }],
        scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } }
      };
      plots[spec[0]] = new uPlot(opts, data, el);
    });
  }

  function load() {
    fetch("/api/series", { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (series) { if (series) { draw(series); } })
      .catch(function () { /* the next period tries again */ });
  }

  load();
  setInterval(load, every);
  window.addEventListener("resize", function () {
    Object.keys(plots).forEach(function (id) {
      var el = document.getElementById(id);
      plots[id].setSize({ width: width(el), height: 190 });
    });
  });
}());
