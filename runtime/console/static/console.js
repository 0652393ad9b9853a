// Live updates: listen to /events; on "change", fetch this page's fragment and swap it in,
// keeping open <details> open. No framework, no network beyond this server.
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
  var fragment = document.body.dataset.live;
  var status = document.getElementById("live-status");
  if (!fragment || !window.EventSource) { if (status) status.textContent = "live: off"; return; }
  var target = document.getElementById("live");
  var busy = false, again = false;
  function withQuery(url) {
    var extra = window.location.search.replace(/^\?/, "");
    return extra ? url + "&" + extra : url;
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var open = Array.prototype.map.call(
      target.querySelectorAll("details[open]"),
      function (d) { var card = d.closest("[id]"); return (card ? card.id : "") + "|" + d.className; });
    fetch(withQuery(fragment), { cache: "no-store" }).then(function (r) { return r.text(); }).then(function (html) {
      target.innerHTML = html;
      localTimes(target);
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
