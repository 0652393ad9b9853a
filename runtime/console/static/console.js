// Live updates: listen to /events; on "change", fetch this page's fragment and swap it in,
// keeping open <details> open and the older pages a reader asked for. "show older" links
// fetch the next older page of a section and add it below. No framework, no network beyond
// this server, no inline script (the console's Content-Security-Policy forbids it).
(function () {
  "use strict";
  // record times: the exact time on hover in the reader's zone, the relative text kept current
  function ago(then) {
    var s = (Date.now() - then.getTime()) / 1000;
    if (s < 45) return "just now";
    if (s >= 86400) return Math.floor(s / 86400) + " d ago";
    if (s >= 3600) return Math.floor(s / 3600) + " h ago";
    if (s >= 60) return Math.floor(s / 60) + " min ago";
    return "just now";
  }
  function localTimes(root) {
    Array.prototype.forEach.call(root.querySelectorAll("time[datetime]"), function (t) {
      var then = new Date(t.getAttribute("datetime"));
      if (isNaN(then.getTime())) return;
      t.title = then.toLocaleString();
      t.textContent = ago(then);
    });
  }
  localTimes(document);
  window.setInterval(function () { localTimes(document); }, 30000);

  // "show older": the link's page of one section (part=timeline or part=cards) replaces the
  // link; the answer ends with the link to the page before it, if any
  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a.older[data-part]");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    if (link.getAttribute("aria-busy") === "true") return;
    link.setAttribute("aria-busy", "true");
    var url = new URL(link.href, window.location.href);
    url.searchParams.set("part", link.dataset.part);
    fetch(url.pathname + url.search, { cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var more = link.closest(".more");
      var holder = document.createElement("div");
      holder.innerHTML = html;
      localTimes(holder);
      while (holder.firstChild) more.parentNode.insertBefore(holder.firstChild, more);
      more.remove();
      document.body.dataset.older = String(Number(document.body.dataset.older || 0) + 1);
    }).catch(function () {
      link.removeAttribute("aria-busy");
      link.textContent = "could not load older entries: try again";
    });
  });

  var fragment = document.body.dataset.live;
  var status = document.getElementById("live-status");
  if (!fragment || !window.EventSource) { if (status) status.textContent = "live: off"; return; }
  var target = document.getElementById("live");
  var busy = false, again = false;
  function withQuery(url) {
    var extra = window.location.search.replace(/^\?/, "");
    return extra ? url + "&" + extra : url;
  }
  // a section showing the newest page says where it starts (data-from); the refresh asks for
  // everything from there on, so the older pages kept below it still join up
  var ANCHORS = { timeline: "from", cards: "cards_from" };
  function anchored(url) {
    Object.keys(ANCHORS).forEach(function (id) {
      var list = document.getElementById(id);
      if (list && list.dataset.from) url += "&" + ANCHORS[id] + "=" + encodeURIComponent(list.dataset.from);
    });
    return url;
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var open = Array.prototype.map.call(
      target.querySelectorAll("details[open]"),
      function (d) { var card = d.closest("[id]"); return (card ? card.id : "") + "|" + d.className; });
    // older pages the reader loaded, with the start of the list they continue
    var kept = Array.prototype.map.call(target.querySelectorAll("[data-keep]"), function (node) {
      var list = document.getElementById(node.dataset.keep);
      return { node: node, list: node.dataset.keep, from: list ? list.dataset.from : undefined };
    });
    fetch(anchored(withQuery(fragment)), { cache: "no-store" }).then(function (r) { return r.text(); }).then(function (html) {
      target.innerHTML = html;
      localTimes(target);
      kept.forEach(function (k) {
        var list = document.getElementById(k.list), fresh = document.getElementById(k.node.id);
        // the server answered from the same start: the loaded older pages still follow on
        if (list && fresh && k.from && list.dataset.from === k.from) fresh.replaceWith(k.node);
      });
      open.forEach(function (key) {
        var parts = key.split("|");
        var card = parts[0] ? document.getElementById(parts[0]) : target;
        var d = card && card.querySelector("details." + parts[1].split(" ").join("."));
        if (d) d.open = true;
      });
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    }).finally(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var source = new EventSource("/events");
  source.addEventListener("open", function () { status.textContent = "live"; status.className = "live-status on"; });
  source.addEventListener("error", function () { status.textContent = "live: reconnecting"; status.className = "live-status"; });
  source.addEventListener("change", refresh);
})();
