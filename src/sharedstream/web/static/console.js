// sharedstream console: re-fetch the page's live part every few seconds, and sort tables.
// The server renders the live part (escaped); this only swaps it in and reorders rows.
// No other script runs here.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var sorted = {};  // table id -> {column, descending}, kept across refreshes

  function cellValue(row, column) {
    var cell = row.cells[column];
    var text = cell ? cell.textContent.trim() : "";
    var number = Number(text.replace(/[,s]$/g, ""));
    return {text: text, number: text !== "" && text !== "-" && !isNaN(number) ? number : null};
  }
  function sortTable(table) {
    var how = sorted[table.id];
    var body = table.tBodies[0];
    if (!how || !body) { return; }
    var rows = Array.prototype.slice.call(body.rows).filter(function (r) {
      return !r.querySelector("td[colspan]");  // "none" rows stay where they are
    });
    rows.sort(function (a, b) {
      var x = cellValue(a, how.column), y = cellValue(b, how.column), order;
      if (x.number !== null && y.number !== null) { order = x.number - y.number; }
      else if (x.number !== null) { order = -1; }
      else if (y.number !== null) { order = 1; }
      else { order = x.text.localeCompare(y.text); }
      return how.descending ? -order : order;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.dataset.sorted = i === how.column ? (how.descending ? "descending" : "ascending") : "";
    });
  }
  function sortAll() {
    live.querySelectorAll("table[id]").forEach(sortTable);
  }
  live.addEventListener("click", function (event) {
    var th = event.target.closest ? event.target.closest("thead th") : null;
    var table = th ? th.closest("table[id]") : null;
    if (!table) { return; }
    var how = sorted[table.id];
    var descending = how && how.column === th.cellIndex ? !how.descending : false;
    sorted[table.id] = {column: th.cellIndex, descending: descending};
    sortTable(table);
  });

  if (!live.dataset.refresh) { return; }
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
  function utc(date) {  // the console's one time format: ISO 8601 in UTC, to the second
    return date.toISOString().slice(0, 19) + "Z";
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
        if (paused) { return; }  // paused while the request was out: keep what is shown
        live.innerHTML = html;
        var all = live.querySelectorAll("details");
        open.forEach(function (i) { if (all[i]) { all[i].open = true; } });
        sortAll();
        say("updated " + utc(new Date()), "ok");
        live.dataset.refreshed = String((Number(live.dataset.refreshed) || 0) + 1);
      })
      .catch(function (error) { say("refresh failed: " + error.message, "failed"); })
      .then(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
}());
