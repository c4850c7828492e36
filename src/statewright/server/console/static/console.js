// statewright console: live updates over server-sent events. The page names its stream in
// <body data-live="...">; on each "change" event the page is fetched again and every element
// marked data-live-part is swapped for its new version, unless a field in it is being edited.
"use strict";
(function () {
  var url = document.body.getAttribute("data-live");
  // A refused form post answers with the page itself: show (and refresh) the page's own address.
  var here = document.body.getAttribute("data-self") || window.location.pathname + window.location.search;
  if (here !== window.location.pathname + window.location.search && window.history.replaceState) {
    window.history.replaceState(null, "", here);
  }
  var state = document.getElementById("live-state");
  if (!url || !window.EventSource) {
    if (state) { state.textContent = "Live updates: off (reload to see changes)"; }
    return;
  }
  function say(text) { if (state) { state.textContent = text; } }
  function edited(part) {
    var fields = part.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden") { continue; }
      if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) { return true; }
        }
      } else if (f.value !== f.defaultValue) { return true; }
    }
    return false;
  }
  function openDetails(part) {
    var open = [];
    var all = part.querySelectorAll("details");
    for (var i = 0; i < all.length; i++) { open.push(all[i].open); }
    return open;
  }
  function refresh() {
    fetch(here, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var next = new DOMParser().parseFromString(html, "text/html");
        var parts = document.querySelectorAll("[data-live-part]");
        var held = false;
        for (var i = 0; i < parts.length; i++) {
          var old = parts[i];
          var fresh = next.getElementById(old.id);
          if (!fresh) { continue; }
          if (edited(old)) { held = true; continue; }
          var open = openDetails(old);
          old.replaceWith(fresh);
          var details = fresh.querySelectorAll("details");
          for (var k = 0; k < details.length && k < open.length; k++) { details[k].open = open[k]; }
        }
        say(held ? "Live updates: this page changed; reload to see all of it (your typing is kept)"
                 : "Live updates: on, updated " + new Date().toLocaleTimeString());
        document.body.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function () { say("Live updates: could not refresh; reload the page"); });
  }
  var source = new EventSource(url, {withCredentials: true});
  source.addEventListener("open", function () { say("Live updates: on"); });
  source.addEventListener("change", refresh);
  source.addEventListener("error", function () { say("Live updates: reconnecting"); });
})();
