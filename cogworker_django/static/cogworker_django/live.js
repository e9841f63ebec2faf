/* The Cogworker dashboard, live: polls live.json (same origin, the admin's session) every
   few seconds and updates the numbers, the queue and process tables, the trend charts and
   the per-job statistics in place. Everything is set with textContent or attributes,
   never as markup. Pause/Resume stops and restarts the polling. No dependencies. */
(function () {
  "use strict";
  var root = document.getElementById("cw-live");
  if (!root || !window.fetch) return;
  var url = root.getAttribute("data-url");
  var interval = Math.max(1, parseInt(root.getAttribute("data-interval"), 10) || 5) * 1000;
  // While the server reads the run history for the first time (the page says "Reading
  // the run history"), poll sooner: the statistics exist within about a second.
  var pendingInterval = Math.max(1, parseInt(root.getAttribute("data-pending-interval"), 10) || 1) * 1000;
  var pending = root.getAttribute("data-pending") === "true";
  var toggle = document.getElementById("cw-live-toggle");
  var status = document.getElementById("cw-live-status");
  var SVG = "http://www.w3.org/2000/svg";
  var paused = false;
  var timer = null;

  function el(tag, attrs, text, ns) {
    var node = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) node.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function rows(tableId, items, cells, empty) {
    var table = document.getElementById(tableId);
    if (!table) return;
    var body = table.tBodies[0];
    var fresh = document.createElement("tbody");
    if (!items || !items.length) {
      var tr = el("tr");
      var td = el("td", { colspan: String(table.tHead.rows[0].cells.length) }, empty);
      tr.appendChild(td);
      fresh.appendChild(tr);
    }
    (items || []).forEach(function (item) {
      var tr = el("tr");
      cells(item).forEach(function (cell) {
        var td = el("td");
        if (cell && cell.node) td.appendChild(cell.node); else td.textContent = String(cell);
        tr.appendChild(td);
      });
      fresh.appendChild(tr);
    });
    table.replaceChild(fresh, body);
  }

  // A job's dotted path as a cell: the parts as text, a <wbr> after each dot (the page's
  // dotted filter), so a narrow column wraps after a dot, never inside a name.
  function jobName(path) {
    var span = el("span", { "class": "cw-job" });
    String(path).split(".").forEach(function (part, i) {
      if (i) {
        span.appendChild(document.createTextNode("."));
        span.appendChild(el("wbr"));
      }
      span.appendChild(document.createTextNode(part));
    });
    return { node: span };
  }

  function chart(c) {
    var g = c.chart;
    var fig = el("figure", { "class": "cw-trend", id: "chart-" + c.id });
    fig.appendChild(el("figcaption", {}, c.title));
    var svg = el("svg", { viewBox: "0 0 " + g.width + " " + g.height, role: "img",
      "aria-label": c.title, "class": "cw-svg" }, null, true);
    g.y_ticks.forEach(function (t) {
      svg.appendChild(el("line", { x1: g.plot_left, x2: g.plot_right, y1: t.y, y2: t.y, "class": "cw-grid" }, null, true));
      svg.appendChild(el("text", { x: g.plot_left - 4, y: t.y, "class": "cw-axis", "text-anchor": "end",
        "dominant-baseline": "middle" }, t.text, true));
    });
    g.x_labels.forEach(function (x) {
      svg.appendChild(el("text", { x: x.x, y: g.height - 6, "class": "cw-axis", "text-anchor": x.anchor }, x.text, true));
    });
    g.lines.forEach(function (line, i) {
      svg.appendChild(el("polyline", { points: line.points, "class": "cw-line cw-series-" + i,
        "data-line": line.name }, null, true));
    });
    fig.appendChild(svg);
    var legend = el("p", { "class": "cw-legend" });
    c.legend.forEach(function (pair, i) {
      legend.appendChild(el("span", { "class": "cw-key cw-series-" + i }));
      legend.appendChild(document.createTextNode(" " + pair[1] + " "));
    });
    fig.appendChild(legend);
    return fig;
  }

  function apply(data) {
    Object.keys(data.numbers || {}).forEach(function (id) {
      var node = document.getElementById(id);
      if (node) node.textContent = String(data.numbers[id]);
    });
    rows("dashboard-queues", data.queues, function (q) {
      return [q.name, q.size, q.latency, q.state];
    }, "No queues yet.");
    rows("dashboard-processes", data.processes, function (p) {
      return [p.name + (p.quiet ? " (quiet)" : ""), p.busy, p.beat];
    }, "No worker process is running.");
    pending = !data.jobs;
    root.setAttribute("data-pending", pending ? "true" : "false");
    if (data.jobs) {
      var note = document.getElementById("cw-digest-pending");
      if (note) note.parentNode.removeChild(note);
      rows("cw-job-stats", data.jobs, function (j) {
        return [jobName(j.job), j.runs, j.failed, j.failure_rate, j.mean, j.p50, j.p95, j.p99];
      }, data.no_runs);
      var trends = document.getElementById("cw-trends");
      if (trends) {
        var fresh = el("div", { "class": "cw-trends", id: "cw-trends" });
        data.charts.forEach(function (c) { fresh.appendChild(chart(c)); });
        trends.parentNode.replaceChild(fresh, trends);
      }
    }
    root.setAttribute("data-updated-at", data.updated_at);
    status.textContent = "updated " + data.updated;
  }

  function poll() {
    timer = null;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        return r.json().then(function (body) { return { ok: r.ok, body: body }; });
      })
      .then(function (res) {
        if (res.ok) apply(res.body);
        else status.textContent = "Redis can't answer: " + (res.body.error || "error");
      })
      .catch(function () { status.textContent = "no answer from the server; retrying"; })
      .then(function () { if (!paused) timer = setTimeout(poll, pending ? pendingInterval : interval); });
  }

  toggle.hidden = false;
  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    root.setAttribute("data-paused", paused ? "true" : "false");
    if (paused) {
      if (timer) clearTimeout(timer);
      timer = null;
      status.textContent = "paused";
    } else {
      poll();
    }
  });
  root.setAttribute("data-paused", "false");
  timer = setTimeout(poll, pending ? pendingInterval : interval);
})();
