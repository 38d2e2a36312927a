// sharedstream console: the Actions page. Every action is confirmed here first (with the
// server's preview where there is one), then POSTed as JSON with the operate token typed
// into this page as "Authorization: Bearer"; the token is never stored. Results and
// errors are shown as text.
(function () {
  "use strict";
  var api = document.querySelector("link[rel=stylesheet]").getAttribute("href")
    .replace(/\/static\/console\.css$/, "") + "/api/v1/actions/";
  var token = document.getElementById("operate-token");
  var panel = document.getElementById("confirm");
  var what = document.getElementById("confirm-what");
  var shown = document.getElementById("confirm-preview");
  var result = document.getElementById("action-result");
  var pending = null;

  function say(text, state) { result.textContent = text; result.dataset.state = state; }

  function post(action, body) {
    var headers = {"Content-Type": "application/json"};
    if (token.value) { headers.Authorization = "Bearer " + token.value; }
    return fetch(api + action, {method: "POST", headers: headers, body: JSON.stringify(body),
                                cache: "no-store", credentials: "same-origin"})
      .then(function (reply) {
        return reply.json().then(function (data) {
          if (!reply.ok) { throw new Error(data.detail || ("HTTP " + reply.status)); }
          return data;
        });
      });
  }

  function ask(text, action, body, preview) {
    pending = {action: action, body: body};
    what.textContent = text;
    shown.hidden = !preview;
    shown.textContent = preview || "";
    panel.hidden = false;
    document.getElementById("confirm-yes").focus();
  }

  function done() { pending = null; panel.hidden = true; }

  document.getElementById("confirm-no").addEventListener("click", function () {
    done(); say("cancelled", "cancelled");
  });
  document.getElementById("confirm-yes").addEventListener("click", function () {
    if (!pending) { return; }
    var run = pending;
    done();
    say("working...", "working");
    post(run.action, run.body)
      .then(function (data) { say(data.result, "ok"); })
      .catch(function (error) { say(error.message, "refused"); });
  });

  // Rows of the live part are re-rendered every few seconds: listen on the document.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.act");
    if (!button) { return; }
    var row = button.closest("tr");
    if (button.dataset.action === "held-retry") {
      var body = {consumer_group: row.dataset.group, topic: row.dataset.topic,
                  partition: Number(row.dataset.partition), offset: Number(row.dataset.offset)};
      ask("Retry " + body.consumer_group + " " + body.topic + "[" + body.partition + "]@" +
          body.offset + " now?", "held-retry", body, null);
    } else if (button.dataset.action === "triggerer-forget") {
      ask("Forget triggerer " + row.dataset.triggerer + "?", "triggerer-forget",
          {triggerer_id: row.dataset.triggerer}, null);
    }
  });

  function list(text) {
    return text.split(",").map(function (s) { return s.trim(); })
      .filter(function (s) { return s; });
  }

  // The replay group's default follows the topic chosen.
  var replay = document.getElementById("dlq-replay");
  if (replay) {
    replay.elements.topic.addEventListener("change", function () {
      replay.elements.group.placeholder = "sharedstream-dlq-replay." + replay.elements.topic.value;
    });
  }

  document.querySelectorAll("form[data-action]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var action = form.dataset.action;
      var body;
      if (action === "dlq-replay") {
        body = {topic: form.elements.topic.value, watchers: list(form.elements.watchers.value),
                reasons: list(form.elements.reasons.value),
                from_start: form.elements.start.value === "start"};
        if (form.elements.group.value.trim()) { body.group = form.elements.group.value.trim(); }
      } else {
        body = {consumer_group: form.elements.consumer_group.value.trim(),
                to: form.elements.to.value.trim()};
      }
      say("previewing...", "working");
      post(action, Object.assign({dry_run: true}, body))
        .then(function (data) {
          say("", "preview");
          var rows = data.detail && data.detail.partitions;
          var lines = rows ? rows.map(function (c) {
            return c.topic + "[" + c.partition + "] " + (c.before === null ? "-" : c.before) +
              " -> " + c.after;
          }).join("\n") : "";
          ask((action === "dlq-replay" ? "Replay? " : "Reset? ") + data.result, action,
              Object.assign({dry_run: false}, body), lines || data.result);
        })
        .catch(function (error) { say(error.message, "refused"); });
    });
  });
}());
