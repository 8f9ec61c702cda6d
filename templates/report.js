/* traceanalyzer report: the interactive timeline and the charts. Our own small code, no library.
   Reads the data embedded in #report-data with JSON.parse. Strings from a trace are only ever
   put on the page with textContent (or drawn on a canvas), never parsed as HTML. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var CAUSES = DATA.causes, PAL = DATA.palette, HOST = DATA.host_lanes;
  var SVGNS = "http://www.w3.org/2000/svg";
  var HOST_COLORS = { ops: PAL.ops, dataloader: CAUSES.dataloader.color, sync: CAUSES.sync.color, copy: CAUSES.memcpy.color };

  // ---- formatting: the rules come with the data (units.format_rules), the same as Python's -------
  var FMT = DATA.format;
  function durationRule(a) {
    for (var i = 0; i < FMT.duration.length; i++) if (a >= FMT.duration[i].from_us) return FMT.duration[i];
    return FMT.duration[FMT.duration.length - 1];
  }
  function fmtUs(us) {
    if (us === null || us === undefined || isNaN(us)) return "n/a";
    var r = durationRule(Math.abs(us));
    var text = (us / r.per).toFixed(r.decimals);
    if (/^-[0.]+$/.test(text)) text = text.slice(1);  // -0.3 us is written 0 us, as in Python
    return text + " " + r.unit;
  }
  // Short form for axes and bins: trailing zeros dropped (200 ms, 1.2 s, 100 us).
  function fmtShort(us) {
    var r = durationRule(Math.abs(us)), v = us / r.per;
    return String(+v.toFixed(Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2)) + " " + r.unit;
  }
  function fmtPct(x) { return (x === null || x === undefined || isNaN(x)) ? "n/a" : (100 * x).toFixed(FMT.percent_decimals) + "%"; }
  function causeColor(c) { return c && CAUSES[c] ? CAUSES[c].color : PAL.idle; }
  function causeLabel(c) { return c && CAUSES[c] ? CAUSES[c].label : (c ? String(c) : "no cause given"); }
  function seriesLabel(key) {
    if (key === "compute") return "GPU compute";
    if (key === "communication") return "communication (exposed)";
    if (key === "memcpy") return "GPU memcpy";
    if (key === "idle") return "GPU idle";
    if (key === "idle:unattributed") return "idle, no cause given";
    return "idle: " + causeLabel(key.slice(5));
  }
  function seriesColor(key) {
    if (key === "compute") return PAL.compute;
    if (key === "communication") return PAL.communication;
    if (key === "memcpy") return PAL.memcpy;
    if (key === "idle" || key === "idle:unattributed") return PAL.idle;
    return causeColor(key.slice(5));
  }
  function niceStep(raw) {
    if (!(raw > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }

  // ---- tooltip --------------------------------------------------------------------------------
  var tip = document.getElementById("tip");
  function showTip(title, rows, x, y) {
    tip.textContent = "";
    var t = document.createElement("div");
    t.className = "t";
    t.textContent = title;
    tip.appendChild(t);
    rows.forEach(function (r) {
      var row = document.createElement("div"), k = document.createElement("span"), v = document.createElement("span");
      row.className = "row"; k.className = "k"; v.className = "v";
      k.textContent = r[0]; v.textContent = r[1];
      row.appendChild(k); row.appendChild(v); tip.appendChild(row);
    });
    tip.hidden = false;
    var w = tip.offsetWidth, h = tip.offsetHeight, left = x + 14, top = y + 14;
    if (left + w > window.innerWidth - 8) left = x - w - 14;
    if (top + h > window.innerHeight - 8) top = y - h - 14;
    tip.style.left = Math.max(4, left) + "px";
    tip.style.top = Math.max(4, top) + "px";
  }
  function hideTip() { tip.hidden = true; }

  // ---- timeline -------------------------------------------------------------------------------
  var LABEL_W = 124, AXIS_H = 20, GAP = 6;

  // Index of the last interval starting at or before t whose end reaches t (within tol), or -1.
  function findAt(starts, durs, t, tol) {
    var lo = 0, hi = starts.length - 1, i = -1;
    while (lo <= hi) {
      var mid = (lo + hi) >> 1;
      if (starts[mid] <= t + tol) { i = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    if (i >= 0 && starts[i] + durs[i] >= t - tol) return i;
    if (i + 1 < starts.length && starts[i + 1] <= t + tol) return i + 1;
    return -1;
  }
  function firstVisible(starts, durs, t) {
    var lo = 0, hi = starts.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (starts[mid] + durs[mid] < t) lo = mid + 1; else hi = mid; }
    return lo;
  }

  // Many ranks: every timeline on the job clock (DATA.job_shift_us: where each rank's window starts
  // on it), with one shared view, so zooming or panning one moves them all.
  var SHIFTS = DATA.job_shift_us || [];
  var JOB_SPAN = 0;
  DATA.ranks.forEach(function (r, i) {
    if (SHIFTS.length === DATA.ranks.length && r.timeline) JOB_SPAN = Math.max(JOB_SPAN, SHIFTS[i] + (r.timeline.window_us || 0));
  });

  function Timeline(box, rank, index) {
    var tl = rank.timeline;
    this.box = box;
    this.canvas = box.querySelector("canvas");
    this.range = box.querySelector(".tl-range");
    this.ctx = this.canvas.getContext("2d");
    this.full = tl ? (tl.window_us || 0) : 0;
    this.shift = JOB_SPAN > 0 ? SHIFTS[index] : 0;  // this rank's time 0 on the job clock
    this.lo = -this.shift;  // the view's bounds, in this rank's time
    this.hi = JOB_SPAN > 0 ? JOB_SPAN - this.shift : this.full;
    this.peers = [];
    this.v0 = this.lo; this.v1 = this.hi;
    this.lanes = [];
    var y = AXIS_H + 4, lanes = this.lanes;
    function add(type, label, h, data, extra) {
      var l = { type: type, label: label, h: h, data: data, y: y };
      for (var k in extra || {}) l[k] = extra[k];
      lanes.push(l); y += h + GAP;
    }
    if (tl && this.full > 0) {
      if (tl.steps.step.length) add("steps", "steps", 18, tl.steps);
      tl.devices.forEach(function (d) {
        add("gpu", d.device, 30, d);
        if (d.comm && d.comm.start_us.length) add("host", d.device + " comm", 14, d.comm, { color: PAL.communication });
        // CUDA graph replays: one block per replay (its first node to its last), however many kernels it ran
        if (d.graphs && d.graphs.start_us.length) add("host", d.device + " graph replays", 14, d.graphs, { color: "#7b2cbf" });
      });
      tl.host.forEach(function (h) { add("host", HOST[h.kind] || h.kind, 14, h, { color: HOST_COLORS[h.kind] || PAL.ops }); });
      tl.counters.forEach(function (c) {
        var max = 0;
        c.value.forEach(function (v) { if (v !== null && v > max) max = v; });
        if (/_pct$/.test(c.metric)) max = Math.max(max, 100);
        add("counter", c.device + " " + c.metric, 34, c, { max: max || 1 });
      });
    }
    this.height = lanes.length ? y + 2 : 36;
    this.cssW = 0;
    this.pending = false;
    this.bind();
    this.draw();
  }

  Timeline.prototype.schedule = function () {
    var self = this;
    if (this.pending) return;
    this.pending = true;
    window.requestAnimationFrame(function () { self.pending = false; self.draw(); });
  };

  Timeline.prototype.plotW = function () { return Math.max(this.canvas.clientWidth - LABEL_W - 6, 10); };

  Timeline.prototype.setView = function (v0, v1, fromPeer) {
    var whole = this.hi - this.lo;
    var span = Math.min(Math.max(v1 - v0, Math.min(1, whole)), whole);
    if (v0 < this.lo) v0 = this.lo;
    if (v0 + span > this.hi) v0 = this.hi - span;
    this.v0 = v0; this.v1 = v0 + span;
    this.schedule();
    if (fromPeer) return;
    var self = this;
    this.peers.forEach(function (p) { p.setView(v0 + self.shift - p.shift, v0 + span + self.shift - p.shift, true); });
  };

  Timeline.prototype.zoom = function (factor, atT) {
    var span = this.v1 - this.v0, t = atT === undefined ? this.v0 + span / 2 : atT;
    var ns = span * factor;
    this.setView(t - (t - this.v0) * ns / span, t - (t - this.v0) * ns / span + ns);
  };

  Timeline.prototype.bind = function () {
    var self = this, c = this.canvas, drag = null;
    this.box.querySelectorAll("button[data-act]").forEach(function (b) {
      b.addEventListener("click", function () {
        var act = b.getAttribute("data-act");
        if (act === "in") self.zoom(0.5);
        else if (act === "out") self.zoom(2);
        else self.setView(self.lo, self.hi);
      });
    });
    if (!this.lanes.length) return;
    c.addEventListener("wheel", function (e) {
      e.preventDefault();
      var r = c.getBoundingClientRect(), x = e.clientX - r.left - LABEL_W;
      var t = self.v0 + Math.min(Math.max(x, 0), self.plotW()) / self.plotW() * (self.v1 - self.v0);
      var d = e.deltaMode === 1 ? e.deltaY * 30 : e.deltaY;
      self.zoom(Math.exp(Math.max(Math.min(d, 300), -300) * 0.002), t);
    }, { passive: false });
    c.addEventListener("pointerdown", function (e) {
      drag = { x: e.clientX, v0: self.v0 };
      c.setPointerCapture(e.pointerId);
      c.classList.add("dragging");
    });
    c.addEventListener("pointermove", function (e) {
      if (drag) {
        var dt = (e.clientX - drag.x) / self.plotW() * (self.v1 - self.v0);
        self.setView(drag.v0 - dt, drag.v0 - dt + (self.v1 - self.v0));
        hideTip();
        return;
      }
      self.hover(e);
    });
    function end(e) {
      if (!drag) return;
      drag = null;
      c.classList.remove("dragging");
      if (c.hasPointerCapture(e.pointerId)) c.releasePointerCapture(e.pointerId);
    }
    c.addEventListener("pointerup", end);
    c.addEventListener("pointercancel", end);
    c.addEventListener("pointerleave", hideTip);
    c.addEventListener("dblclick", function () { self.setView(self.lo, self.hi); });
  };

  Timeline.prototype.draw = function () {
    var c = this.canvas, ctx = this.ctx, dpr = window.devicePixelRatio || 1;
    var w = c.clientWidth;
    if (w !== this.cssW || c.height !== Math.round(this.height * dpr)) {
      this.cssW = w;
      c.style.height = this.height + "px";
      c.width = Math.round(w * dpr);
      c.height = Math.round(this.height * dpr);
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, this.height);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    if (!this.lanes.length) {
      ctx.fillStyle = "#5d6776";
      ctx.fillText("Nothing to draw: the window is empty.", 4, 18);
      this.range.textContent = "";
      return;
    }
    var v0 = this.v0, v1 = this.v1, pw = this.plotW(), scale = pw / (v1 - v0), x0 = LABEL_W;
    var X = function (t) { return x0 + (t - v0) * scale; };
    var sh = this.shift, whole = this.hi - this.lo;
    if (JOB_SPAN > 0) {
      this.range.textContent = (v0 === this.lo && v1 === this.hi)
        ? "job clock " + fmtUs(whole) + "; this rank starts at " + fmtUs(sh)
        : fmtUs(v0 + sh) + " – " + fmtUs(v1 + sh) + " of " + fmtUs(whole) + " (job clock)";
    } else {
      this.range.textContent = (v0 === 0 && v1 === this.full)
        ? "window " + fmtUs(this.full)
        : fmtUs(v0) + " – " + fmtUs(v1) + " of " + fmtUs(this.full);
    }

    // time axis and grid
    var step = niceStep((v1 - v0) / Math.max(2, pw / 110));
    ctx.fillStyle = "#5d6776";
    ctx.strokeStyle = "#e9edf2";
    ctx.lineWidth = 1;
    ctx.textAlign = "center";
    for (var t = Math.ceil((v0 + sh) / step) * step; t <= v1 + sh; t += step) {  // axis in job-clock time
      var gx = Math.round(X(t - sh)) + 0.5;
      ctx.beginPath(); ctx.moveTo(gx, AXIS_H); ctx.lineTo(gx, this.height); ctx.stroke();
      ctx.fillText(fmtShort(t), Math.min(Math.max(gx, x0 + 24), x0 + pw - 24), AXIS_H / 2);
    }
    ctx.textAlign = "left";

    for (var li = 0; li < this.lanes.length; li++) {
      var l = this.lanes[li];
      ctx.fillStyle = "#2c3546";
      ctx.save();
      ctx.beginPath(); ctx.rect(0, l.y, LABEL_W - 8, l.h); ctx.clip();
      ctx.fillText(l.label, 2, l.y + l.h / 2);
      ctx.restore();
      ctx.save();
      ctx.beginPath(); ctx.rect(x0, l.y, pw, l.h); ctx.clip();
      ctx.fillStyle = "#f6f8fa";
      ctx.fillRect(x0, l.y, pw, l.h);
      this["draw_" + l.type](ctx, l, X, scale, v0, v1);
      ctx.restore();
    }
  };

  function drawBlocks(ctx, b, X, scale, v0, v1, y, h, color, shade) {
    var s = b.start_us, d = b.dur_us, n = s.length;
    ctx.fillStyle = color;
    for (var i = firstVisible(s, d, v0); i < n && s[i] <= v1; i++) {
      ctx.globalAlpha = shade && d[i] > 0 ? 0.3 + 0.7 * Math.min(b.covered_us[i] / d[i], 1) : 1;
      ctx.fillRect(X(s[i]), y, Math.max(d[i] * scale, 1), h);
    }
    ctx.globalAlpha = 1;
  }

  Timeline.prototype.draw_steps = function (ctx, l, X, scale, v0, v1) {
    var st = l.data, s = st.start_us, d = st.dur_us;
    for (var i = firstVisible(s, d, v0); i < s.length && s[i] <= v1; i++) {
      var x = X(s[i]), w = Math.max(d[i] * scale, 1);
      ctx.fillStyle = i % 2 ? PAL.step_b : PAL.step_a;
      ctx.fillRect(x, l.y, w, l.h);
      ctx.fillStyle = "#8795a8";
      ctx.fillRect(x, l.y, 1, l.h);
      if (w > 36) { ctx.fillStyle = "#2c3546"; ctx.fillText("step " + st.step[i], Math.max(x, LABEL_W) + 4, l.y + l.h / 2); }
    }
  };

  Timeline.prototype.draw_gpu = function (ctx, l, X, scale, v0, v1) {
    var g = l.data.gaps, s = g.start_us, d = g.dur_us;
    for (var i = firstVisible(s, d, v0); i < s.length && s[i] <= v1; i++) {
      ctx.fillStyle = causeColor(g.cause[i]);
      ctx.fillRect(X(s[i]), l.y + 3, Math.max(d[i] * scale, 1), l.h - 6);
    }
    drawBlocks(ctx, l.data.busy, X, scale, v0, v1, l.y, l.h - 8, PAL.busy, true);
    drawBlocks(ctx, l.data.copies, X, scale, v0, v1, l.y + l.h - 7, 7, PAL.memcpy, false);
  };

  Timeline.prototype.draw_host = function (ctx, l, X, scale, v0, v1) {
    drawBlocks(ctx, l.data, X, scale, v0, v1, l.y + 1, l.h - 2, l.color, true);
  };

  Timeline.prototype.draw_counter = function (ctx, l, X, scale, v0, v1) {
    var t = l.data.t_us, v = l.data.value, started = false;
    ctx.strokeStyle = "#0f7b6c";
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    for (var i = 0; i < t.length; i++) {
      if (v[i] === null) { started = false; continue; }
      var x = X(t[i]), y = l.y + l.h - 2 - (l.h - 4) * v[i] / l.max;
      if (started) ctx.lineTo(x, y); else { ctx.moveTo(x, y); started = true; }
    }
    ctx.stroke();
  };

  function blockRows(b, i, what) {
    var rows = [["start", fmtUs(b.start_us[i])], ["length", fmtUs(b.dur_us[i])]];
    if (b.dur_us[i] > 0 && b.covered_us[i] < b.dur_us[i]) rows.push(["covered", fmtUs(b.covered_us[i]) + " (" + fmtPct(b.covered_us[i] / b.dur_us[i]) + ")"]);
    rows.push([what, String(b.count[i])]);
    if (b.name[i] >= 0) rows.push(["longest", b.names[b.name[i]]]);
    return rows;
  }

  Timeline.prototype.hover = function (e) {
    var r = this.canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    var pw = this.plotW(), scale = pw / (this.v1 - this.v0);
    if (x < LABEL_W || x > LABEL_W + pw) { hideTip(); return; }
    var t = this.v0 + (x - LABEL_W) / scale, tol = 2 / scale;
    for (var li = 0; li < this.lanes.length; li++) {
      var l = this.lanes[li];
      if (y < l.y || y > l.y + l.h) continue;
      var i, b;
      if (l.type === "steps") {
        i = findAt(l.data.start_us, l.data.dur_us, t, 0);
        if (i >= 0) return showTip("step " + l.data.step[i], [["start", fmtUs(l.data.start_us[i])], ["duration", fmtUs(l.data.dur_us[i])]], e.clientX, e.clientY);
      } else if (l.type === "gpu") {
        if (y > l.y + l.h - 8) {
          b = l.data.copies; i = findAt(b.start_us, b.dur_us, t, tol);
          if (i >= 0) return showTip(l.label + ": GPU copies", blockRows(b, i, "copies"), e.clientX, e.clientY);
        }
        var g = l.data.gaps;
        i = findAt(g.start_us, g.dur_us, t, 0);
        if (i >= 0) {
          return showTip(l.label + ": idle gap", [["cause", causeLabel(g.cause[i])], ["start", fmtUs(g.start_us[i])],
            ["length", fmtUs(g.dur_us[i])], ["step", g.step[i] === null ? "–" : String(g.step[i])]], e.clientX, e.clientY);
        }
        b = l.data.busy; i = findAt(b.start_us, b.dur_us, t, tol);
        if (i >= 0) return showTip(l.label + ": GPU busy", blockRows(b, i, "GPU ops"), e.clientX, e.clientY);
      } else if (l.type === "host") {
        b = l.data; i = findAt(b.start_us, b.dur_us, t, tol);
        if (i >= 0) return showTip(l.label, blockRows(b, i, "calls"), e.clientX, e.clientY);
      } else if (l.type === "counter") {
        var ts = l.data.t_us;
        if (ts.length) {
          i = Math.min(firstVisible(ts, ts.map(function () { return 0; }), t), ts.length - 1);
          var v = l.data.value[i];
          return showTip(l.label, [["time", fmtUs(ts[i])], ["value", v === null ? "missing" : String(v)]], e.clientX, e.clientY);
        }
      }
    }
    hideTip();
  };

  // ---- SVG charts -----------------------------------------------------------------------------
  function svg(tag, attrs, parent) {
    var n = document.createElementNS(SVGNS, tag);
    for (var k in attrs) n.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(n);
    return n;
  }
  function text(parent, x, y, s, anchor) {
    var n = svg("text", { x: x, y: y, "text-anchor": anchor || "start" }, parent);
    n.textContent = s;
    return n;
  }
  function legend(box, items) {
    var div = document.createElement("div");
    div.className = "chart-legend";
    items.forEach(function (it) {
      var s = document.createElement("span"), sw = document.createElement("span");
      sw.className = "sw"; sw.style.background = it[1];
      s.appendChild(sw); s.appendChild(document.createTextNode(it[0]));
      div.appendChild(s);
    });
    box.appendChild(div);
  }

  function stepChart(box, ch) {
    box.textContent = "";
    var n = ch.step.length, W = Math.max(box.clientWidth, 320), H = 240, m = { l: 64, r: 10, t: 10, b: 30 };
    var pw = W - m.l - m.r, ph = H - m.t - m.b, top = 0, i, k;
    for (i = 0; i < n; i++) {
      var sum = 0;
      for (k = 0; k < ch.series.length; k++) sum += ch.series[k].values[i];
      top = Math.max(top, sum, ch.duration_us[i] || 0);
    }
    top = top || 1;
    var root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" }, box);
    var tick = niceStep(top / 4);
    for (var v = 0; v <= top * 1.001; v += tick) {
      var gy = m.t + ph - ph * v / top;
      svg("line", { x1: m.l, x2: W - m.r, y1: gy, y2: gy, "class": v === 0 ? "axis" : "grid" }, root);
      text(root, m.l - 6, gy + 4, fmtShort(v), "end");
    }
    var slot = pw / n, bw = Math.max(Math.min(slot * 0.78, 60), 1), every = Math.ceil(n / 24);
    for (i = 0; i < n; i++) {
      var x = m.l + slot * i + (slot - bw) / 2, y = m.t + ph;
      var g = svg("g", {}, root);
      for (k = 0; k < ch.series.length; k++) {
        var val = ch.series[k].values[i], h = ph * val / top;
        if (h <= 0) continue;
        y -= h;
        svg("rect", { x: x, y: y, width: bw, height: h, fill: seriesColor(ch.series[k].key) }, g);
      }
      var hit = svg("rect", { x: m.l + slot * i, y: m.t, width: slot, height: ph, fill: "transparent", "class": "hit" }, g);
      hit.addEventListener("mousemove", (function (idx) {
        return function (e) {
          var rows = [["duration", fmtUs(ch.duration_us[idx])]];
          ch.series.forEach(function (s) { rows.push([seriesLabel(s.key), fmtUs(s.values[idx])]); });
          rows.push(["DataLoader wait", fmtUs(ch.dataloader_wait_us[idx])]);
          showTip("step " + ch.step[idx], rows, e.clientX, e.clientY);
        };
      })(i));
      hit.addEventListener("mouseleave", hideTip);
      if (i % every === 0) text(root, m.l + slot * i + slot / 2, H - m.b + 16, String(ch.step[i]), "middle");
    }
    text(root, m.l + pw / 2, H - 2, "step", "middle");
    legend(box, ch.series.map(function (s) { return [seriesLabel(s.key), seriesColor(s.key)]; }));
  }

  function binLabel(b) {
    if (b.to_us === null) return "≥ " + fmtShort(b.from_us);
    if (!b.from_us) return "< " + fmtShort(b.to_us);
    return fmtShort(b.from_us) + "–" + fmtShort(b.to_us);
  }

  function histChart(box, bins, minGap) {
    box.textContent = "";
    var shown = bins.filter(function (b) { return b.to_us === null || b.to_us > minGap; });
    var W = Math.max(box.clientWidth, 300), H = 190, m = { l: 40, r: 8, t: 18, b: 40 };
    var pw = W - m.l - m.r, ph = H - m.t - m.b, top = 1;
    shown.forEach(function (b) { top = Math.max(top, b.count); });
    var root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" }, box);
    svg("line", { x1: m.l, x2: W - m.r, y1: m.t + ph, y2: m.t + ph, "class": "axis" }, root);
    var slot = pw / Math.max(shown.length, 1), bw = Math.min(slot * 0.7, 70);
    shown.forEach(function (b, i) {
      var h = ph * b.count / top, x = m.l + slot * i + (slot - bw) / 2;
      svg("rect", { x: x, y: m.t + ph - h, width: bw, height: Math.max(h, b.count ? 1 : 0), fill: PAL.busy }, root);
      text(root, x + bw / 2, m.t + ph - h - 4, String(b.count), "middle");
      text(root, x + bw / 2, m.t + ph + 14, binLabel(b), "middle");
      text(root, x + bw / 2, m.t + ph + 28, b.count ? fmtUs(b.total_us) : "", "middle").setAttribute("class", "sub");
      var hit = svg("rect", { x: m.l + slot * i, y: m.t, width: slot, height: ph + 30, fill: "transparent", "class": "hit" }, root);
      hit.addEventListener("mousemove", function (e) {
        showTip("gaps " + binLabel(b), [["gaps", String(b.count)], ["total", fmtUs(b.total_us)]], e.clientX, e.clientY);
      });
      hit.addEventListener("mouseleave", hideTip);
    });
    text(root, 2, 12, "gaps", "start");
  }

  // ---- wire up --------------------------------------------------------------------------------
  var timelines = [];
  document.querySelectorAll(".tl[data-rank]").forEach(function (box) {
    var i = +box.getAttribute("data-rank");
    timelines.push(new Timeline(box, DATA.ranks[i], i));
  });
  if (JOB_SPAN > 0) timelines.forEach(function (t) { t.peers = timelines.filter(function (p) { return p !== t; }); });
  function drawCharts() {
    document.querySelectorAll(".stepchart[data-rank]").forEach(function (box) {
      stepChart(box, DATA.ranks[+box.getAttribute("data-rank")].charts.per_step);
    });
    document.querySelectorAll(".histchart[data-rank]").forEach(function (box) {
      var r = DATA.ranks[+box.getAttribute("data-rank")];
      histChart(box, r.devices[+box.getAttribute("data-device")].histogram, DATA.min_gap_us || 0);
    });
  }
  drawCharts();
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    timelines.forEach(function (t) { t.schedule(); });
    if (resizeTimer) window.clearTimeout(resizeTimer);
    resizeTimer = window.setTimeout(drawCharts, 120);
  });
})();
