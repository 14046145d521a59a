// Reckon console: behaviour the Content-Security-Policy allows (no inline script, no eval).
// The queue polls every 15 s (hx-trigger on #results) but skips a poll while the tab is hidden
// or while the operator has ticked calls for a bulk action or moved to a row with j/k, so a refresh
// never drops a selection.
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail.elt;
  if (elt.id !== "results") return;  // the poll itself; links and forms inside have their own elt
  if (document.visibilityState !== "visible" || elt.querySelector("input:checked, .kbd-current")) event.preventDefault();
});

// Keyboard shortcuts (the help dialog lists them). They move, open, claim and search; none of them
// decides a call: a decision always takes the form on the call's screen and its own button.
(function () {
  function typing(el) {
    if (!el) return false;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }
  function rows() {
    // The rows of the page's list: table rows with a link, or search hits.
    return Array.prototype.filter.call(
      document.querySelectorAll("main tbody tr, main .hit"),
      function (r) { return r.querySelector("a[href]") && r.offsetParent !== null; }
    );
  }
  function current(list) {
    for (var i = 0; i < list.length; i++) if (list[i].classList.contains("kbd-current")) return i;
    return -1;
  }
  function select(list, i) {
    list.forEach(function (r) { r.classList.remove("kbd-current"); r.removeAttribute("aria-current"); });
    var row = list[i];
    row.classList.add("kbd-current");
    row.setAttribute("aria-current", "true");
    row.querySelector("a[href]").focus();
    row.scrollIntoView({ block: "nearest" });
  }
  function help() {
    var d = document.getElementById("keys-help");
    if (d && !d.open) d.showModal();
  }
  document.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest("#keys-help-button")) help();
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var box = document.getElementById("site-q");
    if (typing(event.target)) {
      if (event.key === "Escape" && event.target === box) box.blur();
      return;
    }
    var d = document.getElementById("keys-help");
    if (d && d.open) return;  // the dialog handles its own keys (Esc closes it)
    var list, i;
    switch (event.key) {
      case "/":
        if (box) { event.preventDefault(); box.focus(); box.select(); }
        return;
      case "?":
        event.preventDefault(); help();
        return;
      case "j": case "k":
        list = rows();
        if (!list.length) return;
        i = current(list);
        i = event.key === "j" ? Math.min(i + 1, list.length - 1) : Math.max(i - 1, 0);
        event.preventDefault(); select(list, i);
        return;
      case "o":
        list = rows(); i = current(list);
        if (i >= 0) { event.preventDefault(); list[i].querySelector("a[href]").click(); }
        return;
      case "c":
        list = rows(); i = current(list);
        if (i < 0) return;
        var claim = list[i].querySelector("button[formaction$='/claim/']");
        if (claim) { event.preventDefault(); claim.click(); }
        return;
    }
  });
})();

// "Expand all" / "collapse all" on a run's screen: fold or unfold every payload in place (the
// links also work without JavaScript, reloading the page with every payload open or folded).
document.addEventListener("click", function (event) {
  var link = event.target.closest ? event.target.closest("a.expand-all") : null;
  if (!link) return;
  event.preventDefault();
  var open = link.getAttribute("data-expand") === "open";
  document.querySelectorAll("main details.payload, main .decisions details").forEach(function (d) { d.open = open; });
});

// A form answered with errors: move focus to the list of them (it sits next to the form), so a
// keyboard or screen-reader user lands on what to fix instead of the top of a long page.
document.addEventListener("DOMContentLoaded", function () {
  var errors = document.getElementById("decide-errors");
  if (errors) { errors.focus(); errors.scrollIntoView({block: "center"}); }
});

// Times are written in UTC; hovering one shows it in the reader's own time. The server fills the
// title when the person chose a time zone (Preferences); otherwise the browser's zone is used.
function reckonLocalTimes(root) {
  root.querySelectorAll("time[datetime]:not([title])").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (!isNaN(d)) t.title = d.toLocaleString(undefined, {year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"});
  });
}
document.addEventListener("DOMContentLoaded", function () { reckonLocalTimes(document); });
document.addEventListener("htmx:afterSwap", function (e) { reckonLocalTimes(e.target); });

// The session ended (console/session.py): an htmx request was answered with nothing to swap and
// this event. The page stays as it is, with a banner saying so and a sign-in link back here.
document.addEventListener("reckon:signed-out", reckonSignedOut);
function reckonSignedOut() {
  var banner = document.getElementById("signed-out");
  if (!banner || !banner.hidden) return;
  document.getElementById("signed-out-link").href = "/login/?next=" + encodeURIComponent(location.pathname + location.search);
  banner.hidden = false;
}

// What was typed into a decision form is kept in this tab (sessionStorage) until it is sent and
// answered. If the answer was "nothing was recorded, sign in again" (or the banner above sent the
// person to sign in), the call's screen puts it back after signing in and says so. Any other
// arrival on the screen (the decision recorded, Back, a new visit) starts from an empty form.
(function () {
  var FIELDS = ["decision", "reason", "evidence_ref", "assignee"];
  function key(path) { return "reckon-draft:" + path; }
  function read(path) {
    try { return JSON.parse(sessionStorage.getItem(key(path)) || "null"); } catch (e) { return null; }
  }
  function write(path, draft) { try { sessionStorage.setItem(key(path), JSON.stringify(draft)); } catch (e) { /* storage off: nothing kept */ } }
  function values(form) {
    var out = {};
    FIELDS.forEach(function (name) {
      var el = form.elements[name];  // a RadioNodeList's value is its checked radio's
      if (el) out[name] = el.value;
    });
    return out;
  }
  function fill(form, fields) {
    FIELDS.forEach(function (name) {
      var value = fields[name] || "";
      if (name === "decision") {
        var radio = form.querySelector("input[name='decision'][value='" + value + "']:not([disabled])");
        if (radio) radio.checked = true;
      } else if (form.elements[name]) {
        form.elements[name].value = value;
      }
    });
  }
  function resume(path) {
    var draft = read(path);
    if (draft) { draft.resume = true; write(path, draft); }
  }
  document.addEventListener("DOMContentLoaded", function () {
    var ended = document.getElementById("nothing-recorded");
    if (ended) resume(ended.getAttribute("data-resume"));
    var link = document.getElementById("signed-out-link");
    var form = document.getElementById("decide-form");
    if (!form) return;
    var path = form.getAttribute("data-draft");
    if (link) link.addEventListener("click", function () { write(path, {fields: values(form), resume: true}); });
    var draft = read(path);
    var nav = (performance.getEntriesByType && performance.getEntriesByType("navigation")[0]) || {};
    if (!form.hasAttribute("data-posted") && nav.type === "back_forward") form.reset();
    if (draft && draft.resume && !form.hasAttribute("data-posted")) {
      fill(form, draft.fields || {});
      document.getElementById("draft-restored").hidden = false;
      write(path, {fields: draft.fields, resume: false});
    } else {
      sessionStorage.removeItem(key(path));
    }
    form.addEventListener("input", function () { write(path, {fields: values(form), resume: false}); });
    form.addEventListener("change", function () { write(path, {fields: values(form), resume: false}); });
  });
  // A page put back from the back-forward cache shows the form as it was when left: empty it, so
  // Back after a decision never offers the same decision ready to send again.
  window.addEventListener("pageshow", function (event) {
    var form = document.getElementById("decide-form");
    if (event.persisted && form) form.reset();
  });
})();

// The queue's filters fold away on a phone unless one is in use, so the first screen shows calls.
document.addEventListener("DOMContentLoaded", function () {
  var fold = document.getElementById("queue-filters-d");
  if (fold && !fold.hasAttribute("data-active") && window.matchMedia("(max-width: 700px)").matches) fold.open = false;
});

// The reason's counter: how many of its 2,000 characters are used (the limit the server checks).
document.addEventListener("DOMContentLoaded", function () {
  var box = document.getElementById("id_reason"), out = document.getElementById("reason-count");
  if (!box || !out) return;
  var limit = parseInt(out.getAttribute("data-limit"), 10);
  function count() { out.textContent = "reason: " + box.value.length.toLocaleString("en-GB") + " of " + limit.toLocaleString("en-GB") + " characters"; }
  box.addEventListener("input", count);
  count();
});

// A table the reports screen loads after the page (templates/console/_report_loading.html) that
// could not be loaded says so, beside its link to a page of its own, instead of loading for ever.
function reckonDeferredFailed(e) {
  var box = e.detail.elt;
  if (!box || !box.classList || !box.classList.contains("deferred")) return;
  var state = box.querySelector(".loading-state");
  var status = e.detail.xhr && e.detail.xhr.status ? " (the server answered " + e.detail.xhr.status + ")" : " (no answer from the server)";
  box.removeAttribute("aria-busy");
  if (state) {
    state.textContent = "This table could not be loaded" + status + ".";
    state.parentNode.className = "alert error";  // the console's error style, as a refused form's
    state.parentNode.setAttribute("role", "alert");
  }
}
document.addEventListener("htmx:responseError", reckonDeferredFailed);
document.addEventListener("htmx:sendError", reckonDeferredFailed);
