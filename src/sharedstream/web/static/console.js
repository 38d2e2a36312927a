// sharedstream console: re-fetch the page's live part every few seconds.
// The server renders it (escaped); this only swaps it in. No other script runs here.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !live.dataset.refresh) { return; }
  var every = Number(live.dataset.refresh) || 2000;
  var status = document.getElementById("refresh-status");
  var toggle = document.getElementById("refresh-toggle");
  var paused = false;
  function say(text, state) {
    if (status) { status.textContent = text; status.dataset.state = state; }
  }
  if (toggle) {
    toggle.addEventListener("click", function () {
      paused = !paused;
      toggle.textContent = paused ? "resume" : "pause";
      say(paused ? "paused" : "live", paused ? "paused" : "ok");
    });
  }
  function openDetails() {  // keep what the reader expanded open across refreshes
    var open = [];
    live.querySelectorAll("details[open]").forEach(function (d, i) { open.push(i); });
    return open;
  }
  function tick() {
    if (paused || document.hidden) { setTimeout(tick, every); return; }
    var open = openDetails();
    fetch(window.location.href, {headers: {"X-Console-Fragment": "1"}, cache: "no-store",
                                 credentials: "same-origin"})
      .then(function (reply) {
        if (!reply.ok) { throw new Error("HTTP " + reply.status); }
        return reply.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        var all = live.querySelectorAll("details");
        open.forEach(function (i) { if (all[i]) { all[i].open = true; } });
        say("updated " + new Date().toLocaleTimeString(), "ok");
        live.dataset.refreshed = String((Number(live.dataset.refreshed) || 0) + 1);
      })
      .catch(function (error) { say("refresh failed: " + error.message, "failed"); })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
}());
