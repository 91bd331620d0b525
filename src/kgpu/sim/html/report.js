// kgpu report: draws the cluster map of the chosen step from the JSON in #kgpu-data.
// No network, no libraries: plain DOM and SVG strings (text is escaped before it is inserted).
(function () {
  "use strict";
  var started = performance.now();
  var D = JSON.parse(document.getElementById("kgpu-data").textContent);
  // one node alone (kgpu plan) is drawn larger, with whole MIG profile names; a step with
  // many nodes is drawn small, without captions (tooltips still say everything)
  var PLAN = D.kind === "plan", FEW_NODES = 12, DENSE_NODES = 48;
  var W, H, GAP, CAPTION;
  function size(nodes) {
    var dense = nodes > DENSE_NODES, few = nodes <= FEW_NODES;
    W = PLAN ? 200 : dense ? 22 : few ? 80 : 64;
    H = PLAN ? 64 : dense ? 18 : few ? 46 : 38;
    GAP = PLAN ? 12 : dense ? 3 : 6;
    CAPTION = dense ? 0 : 14;
    map.className = dense ? "dense" : "";
  }
  var MODE = { "time-slicing": "TS", "mps": "MPS" };

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function num(n) { return Number(n).toLocaleString("en-US"); }
  function duration(t) {
    var s = Math.round(t);
    if (s < 60 || (s < 120 && s % 60)) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? (s % 60) + "s" : "");
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    return h + "h" + (m ? m + "m" : "");
  }
  function str(i) { return i < 0 ? null : D.strings[i]; }
  function podName(i) { var p = D.pods[i]; return D.prefixes[p[0]] + p[1]; }
  function holder(i) {
    return i === null || i < 0 ? "free" : podName(i) + " (" + D.workloads[D.pods[i][2]][0] + ")";
  }
  function fillOf(i) { return i === null || i < 0 ? null : D.workloads[D.pods[i][2]][1]; }

  // a packed node state (see kgpu/sim/html/encode.py) -> the node as capture.py documents it
  function expand(k) {
    var st = D.states[k], sh = D.shapes[st[0]], layout = D.layouts[sh[4]];
    return {
      name: str(sh[0]), group: str(sh[1]), clique: str(sh[2]) || "", machine: str(sh[3]),
      ready: (st[1] & 1) === 1, unschedulable: (st[1] & 2) === 2, pods: st[2],
      config: str(st[3]), migConfig: str(st[4]),
      channels: st[5].map(function (ch) {
        return { domain: str(ch[0]), device: str(ch[1]), pod: ch[2], claim: str(ch[3]) };
      }),
      gpus: layout.map(function (g, i) {
        var dyn = st[6][i] || [0, 0, []];
        return {
          index: g[0], uuid: sh[5][i], product: str(g[1]), memoryMiB: g[2], mode: str(g[3]),
          slices: g[4], unhealthy: dyn[0] === 1, xid: dyn[1], note: str(g[6]),
          devices: g[5].map(function (d, j) {
            var dd = dyn[2][j] || 0, slots = [];
            for (var n = 0; n < d[5]; n++) slots.push(dd ? dd[2 + n] : -1);
            return {
              start: d[0], size: d[1], profile: str(d[2]), resource: str(d[3]), sharing: str(d[4]),
              unhealthy: dd ? dd[0] === 1 : false, claim: dd ? str(dd[1]) : null, slots: slots
            };
          })
        };
      })
    };
  }

  // one rectangle per replica: side by side for a whole GPU, stacked inside a MIG device
  function slots(dev, x, y, w, h, stacked, label) {
    var out = "", n = dev.slots.length;
    for (var k = 0; k < n; k++) {
      var sx = stacked ? x : x + (w * k) / n, sy = stacked ? y + (h * k) / n : y;
      var sw = stacked ? w : w / n, sh = stacked ? h / n : h;
      var fill = fillOf(dev.slots[k]);
      var what = label + (n > 1 ? ", replica " + k : "") + ": " + holder(dev.slots[k]);
      out += '<rect class="slot' + (fill ? "" : " free") + '" x="' + sx.toFixed(2) + '" y="' +
        sy.toFixed(2) + '" width="' + sw.toFixed(2) + '" height="' + sh.toFixed(2) + '"' +
        (fill ? ' fill="' + fill + '"' : "") + "><title>" + esc(what) + "</title></rect>";
    }
    return out;
  }

  // "3g.40gb" where it fits, "3g" where only that does (about 6 px a character)
  function migLabel(profile, width) {
    if (profile.length * 6 + 4 <= width) return profile;
    var short = profile.split(".")[0];
    return short.length * 6 + 5 <= width ? short : "";
  }

  function cell(c, x) {
    var out = '<g class="gpu mode-' + c.mode + (c.unhealthy ? " unhealthy" : "") +
      '" transform="translate(' + x + ',0)">';
    var head = "GPU " + c.index + " · " + c.product + " · " + Math.round(c.memoryMiB / 1024) +
      " GiB" + (c.unhealthy ? " · UNHEALTHY" : "") + (c.xid ? " · last XID " + c.xid : "") +
      "\n" + c.uuid +
      (c.mode === "none" ? "\nnot advertised: no device plugin serves it" : "") +
      (c.note ? "\n" + c.note : "");
    out += "<title>" + esc(head) + "</title>";
    out += '<rect class="gf' + (c.mode === "none" ? " off" : "") + (c.unhealthy ? " bad" : "") +
      '" x="0.5" y="0.5" width="' + (W - 1) + '" height="' + (H - 1) + '"/>';
    var caption = "";
    if (c.mode === "mig") {
      var sw = W / c.slices;
      for (var s = 1; s < c.slices; s++) {
        out += '<line class="grid-slice" x1="' + (s * sw).toFixed(2) + '" x2="' +
          (s * sw).toFixed(2) + '" y1="1" y2="' + (H - 1) + '"/>';
      }
      c.devices.forEach(function (d) {
        var dx = d.start * sw, dw = d.size * sw;
        var label = "MIG " + (d.profile || "?") + " (slices " + d.start + "-" +
          (d.start + d.size - 1) + ")" + (d.claim ? ", DRA claim " + d.claim : "") +
          (d.unhealthy ? ", UNHEALTHY" : "");
        if (!d.slots.length) {
          out += '<rect class="slot off" x="' + dx.toFixed(2) + '" y="1" width="' + dw.toFixed(2) +
            '" height="' + (H - 2) + '"><title>' + esc(label + ": not advertised") + "</title></rect>";
        } else {
          out += slots(d, dx, 1, dw, H - 2, true, label);
        }
        out += '<rect class="mig" data-profile="' + esc(d.profile || "") + '" x="' + (dx + 0.5).toFixed(2) +
          '" y="1" width="' + (dw - 1).toFixed(2) + '" height="' + (H - 2) + '"/>';
        var name = migLabel(d.profile || "", dw);
        if (name) {
          out += '<text class="prof" x="' + (dx + dw / 2).toFixed(2) + '" y="' + (H / 2 + 4) +
            '" text-anchor="middle">' + esc(name) + "</text>";
        }
        if (d.claim) {
          out += '<rect class="dra" x="' + (dx + 1.5).toFixed(2) + '" y="2.5" width="' +
            (dw - 3).toFixed(2) + '" height="' + (H - 5) + '"/>';
        }
        if (d.unhealthy && !c.unhealthy) {
          out += '<rect class="hatch" x="' + dx.toFixed(2) + '" y="1" width="' + dw.toFixed(2) +
            '" height="' + (H - 2) + '"/>';
        }
      });
      caption = "MIG";
    } else {
      var d = c.devices[0];
      var label = "GPU " + c.index + (d.claim ? ", DRA claim " + d.claim : "");
      if (c.mode !== "none") out += slots(d, 1, 1, W - 2, H - 2, false, label);
      if (d.claim) {
        out += '<rect class="dra" x="2.5" y="2.5" width="' + (W - 5) + '" height="' + (H - 5) + '"/>';
      }
      caption = c.mode === "none" ? "off" : d.claim ? "DRA" :
        MODE[c.mode] ? MODE[c.mode] + "×" + d.slots.length : c.note ? "whole" : "";
    }
    if (c.unhealthy) {
      out += '<rect class="hatch" x="1" y="1" width="' + (W - 2) + '" height="' + (H - 2) + '"/>';
    }
    if (!CAPTION) return out + "</g>";
    out += '<text class="cap" x="1" y="' + (H + 11) + '">' + c.index + "</text>";
    if (c.unhealthy) {
      out += '<text class="cap bad" x="' + W + '" y="' + (H + 11) + '" text-anchor="end">✕ ' +
        (c.xid ? "XID " + c.xid : "down") + "</text>";
    } else if (caption) {
      out += '<text class="cap" x="' + W + '" y="' + (H + 11) + '" text-anchor="end">' + caption + "</text>";
    }
    return out + "</g>";
  }

  function nodeHtml(n) {
    var cls = "node" + (n.ready ? "" : " notready") + (n.unschedulable ? " cordoned" : "");
    var busy = 0, bad = 0;
    n.gpus.forEach(function (c) {
      if (c.unhealthy) bad++;
      if (c.devices.some(function (d) { return d.slots.some(function (s) { return s !== null && s >= 0; }); })) busy++;
    });
    var out = '<div class="' + cls + '" data-node="' + esc(n.name) + '"><div class="nh"><b>' +
      esc(n.name) + "</b>";
    if (!n.ready) out += '<span class="badge bad">NotReady</span>';
    if (n.unschedulable) out += '<span class="badge warn">cordoned</span>';
    if (!PLAN) out += '<span class="sub">' + n.pods + (n.pods === 1 ? " pod" : " pods") + "</span>";
    var cfg = [];
    if (n.config) cfg.push("config " + n.config);
    if (n.migConfig) cfg.push("mig " + n.migConfig);
    if (cfg.length) out += '<span class="nodecfg">' + esc(cfg.join(" · ")) + "</span>";
    out += "</div>";
    if (n.gpus.length && PLAN) {  // large cells, one SVG each, wrapping on narrow screens
      out += '<div class="cells">' + n.gpus.map(function (c) {
        return '<svg class="gpus" width="' + W + '" height="' + (H + CAPTION) + '" viewBox="0 0 ' + W +
          " " + (H + CAPTION) + '" role="img" aria-label="' + esc("GPU " + c.index + ": " + c.product) +
          '">' + cell(c, 0) + "</svg>";
      }).join("") + "</div>";
    } else if (n.gpus.length) {
      var width = n.gpus.length * (W + GAP) - GAP, height = H + CAPTION;
      var aria = n.name + ": " + n.gpus.length + " GPUs, " + busy + " in use" +
        (bad ? ", " + bad + " unhealthy" : "");
      out += '<svg class="gpus" width="' + width + '" height="' + height + '" viewBox="0 0 ' + width +
        " " + height + '" role="img" aria-label="' + esc(aria) + '">';
      n.gpus.forEach(function (c, i) { out += cell(c, i * (W + GAP)); });
      out += "</svg>";
    } else {
      out += '<div class="nogpu">no GPUs</div>';
    }
    if (n.channels.length) {
      out += '<ul class="channels">';
      n.channels.forEach(function (ch) {
        var what = (ch.device.indexOf("daemon") === 0 ? "IMEX daemon" : "IMEX " + ch.device);
        var color = fillOf(ch.pod);
        out += '<li title="' + esc("ComputeDomain " + ch.domain + ", claim " + ch.claim + ", " + holder(ch.pod)) +
          '">' + (color ? '<span class="sw" style="background:' + color + '"></span>' : "") +
          esc(what + " · " + (ch.domain || "?")) + "</li>";
      });
      out += "</ul>";
    }
    return out + "</div>";
  }

  function groupHtml(g, nodes) {
    var head = (g.machine && g.machine !== g.name ? g.machine + " · " : "") + num(g.nodes) + (g.nodes === 1 ? " node" : " nodes") +
      (g.ready < g.nodes ? " (" + num(g.nodes - g.ready) + " NotReady)" : "") +
      (g.gpus ? " · " + num(g.gpus) + (g.gpus === 1 ? " GPU" : " GPUs") + (PLAN ? "" : ", " + num(g.inUse) + " in use") +
        (g.unhealthy ? ", " + num(g.unhealthy) + " unhealthy" : "") : "");
    var out = '<section class="group" data-group="' + esc(g.name) + '"><h3>' + esc(g.name) +
      ' <span class="sub">' + esc(head) + "</span></h3>";
    if (g.shown < g.nodes) {
      out += '<p class="more">Showing ' + num(g.shown) + " of " + num(g.nodes) +
        " nodes (NotReady, cordoned and unhealthy ones first); the counts above cover all.</p>";
    }
    var cliques = [], byClique = {};
    nodes.forEach(function (n) {
      if (!(n.clique in byClique)) { byClique[n.clique] = []; cliques.push(n.clique); }
      byClique[n.clique].push(n);
    });
    cliques.forEach(function (q) {
      var inner = '<div class="nodes">' + byClique[q].map(nodeHtml).join("") + "</div>";
      out += q ? '<div class="clique" data-clique="' + esc(q) + '"><h4>NVLink clique ' + esc(q) +
        " · " + byClique[q].length + " nodes</h4>" + inner + "</div>" : inner;
    });
    return out + "</section>";
  }

  function warningsHtml(f) {
    if (!f.warnings || !f.warnings.length) return "";
    return "<h3>Warnings</h3><ul>" + f.warnings.map(function (w) { return "<li>" + esc(w) + "</li>"; }).join("") + "</ul>";
  }

  function infoHtml(f) {
    if (D.kind === "plan") return warningsHtml(f) ? "<div>" + warningsHtml(f) + "</div>" : "";
    var phases = Object.keys(f.phases).map(function (k) {
      return "<span>" + esc(k) + " <b>" + num(f.phases[k]) + "</b></span>";
    }).join("") || "<span>no pods</span>";
    var out = '<div><h3>Pods</h3><p class="phases">' + phases + "</p>";
    if (f.pending.length) {
      out += '<ul class="pending">' + f.pending.map(function (p) {
        return "<li><b>" + esc(p.pod) + "</b>" + (p.message ? ": " + esc(p.message) : "") + "</li>";
      }).join("") + "</ul>";
    }
    out += "</div><div><h3>Events in this step</h3>";
    if (f.events.length) {
      out += '<ol class="events">' + f.events.map(function (e) {
        return '<li class="' + esc(e.type) + '"><b>' + esc(e.type + " " + e.reason) + "</b> " +
          esc(e.object) + ": " + esc(e.message) + "</li>";
      }).join("") + "</ol>";
      if (f.eventCount > f.events.length) {
        out += '<p class="more">… and ' + num(f.eventCount - f.events.length) + " more (kgpu sim -o json lists them)</p>";
      }
    } else {
      out += '<p class="note">none (Scheduled and NodeReady events are not listed)</p>';
    }
    return out + warningsHtml(f) + "</div>";
  }

  var map = document.getElementById("map");
  var info = document.getElementById("stepinfo");
  var select = document.getElementById("step");
  var prev = document.getElementById("prev");
  var next = document.getElementById("next");
  var now = document.getElementById("now");

  function show(i) {
    var f = D.frames[i];
    var nodes = f.nodes.map(expand);
    size(nodes.length);
    var byGroup = {};
    nodes.forEach(function (n) { (byGroup[n.group] = byGroup[n.group] || []).push(n); });
    map.innerHTML = f.groups.map(function (g) { return groupHtml(g, byGroup[g.name] || []); }).join("");
    map.setAttribute("data-step", String(i));
    if (info) info.innerHTML = infoHtml(f);
    if (select) select.value = String(i);
    if (prev) prev.disabled = i === 0;
    if (next) next.disabled = i === D.frames.length - 1;
    if (now) now.textContent = "t=" + duration(f.time);
    var charts = document.querySelectorAll("svg.chart");
    for (var k = 0; k < charts.length; k++) {
      var c = charts[k], t0 = +c.dataset.t0, t1 = +c.dataset.t1, x0 = +c.dataset.x0, x1 = +c.dataset.x1;
      var x = x0 + ((f.time - t0) / ((t1 - t0) || 1)) * (x1 - x0);
      var cursor = c.querySelector(".cursor");
      cursor.setAttribute("x1", x.toFixed(1));
      cursor.setAttribute("x2", x.toFixed(1));
    }
  }

  // #step=N in the address opens that step (a link to one moment of the run)
  function go(i) {
    show(i);
    if (history.replaceState) history.replaceState(null, "", "#step=" + i);
  }
  if (select) select.addEventListener("change", function () { go(+select.value); });
  if (prev) prev.addEventListener("click", function () { go(Math.max(0, +select.value - 1)); });
  if (next) next.addEventListener("click", function () { go(Math.min(D.frames.length - 1, +select.value + 1)); });
  var asked = /step=(\d+)/.exec(location.hash);
  show(asked ? Math.min(+asked[1], D.frames.length - 1) : D.frames.length - 1);
  document.body.setAttribute("data-render-ms", String(Math.round(performance.now() - started)));
})();
