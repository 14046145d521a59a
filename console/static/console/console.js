// Reckon console: behaviour the Content-Security-Policy allows (no inline script, no eval).
// The queue polls every 15 s (hx-trigger on #results) but skips a poll while the tab is hidden
// or while the operator has ticked calls for a bulk action, so a refresh never drops a selection.
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail.elt;
  if (elt.id !== "results") return;  // the poll itself; links and forms inside have their own elt
  if (document.visibilityState !== "visible" || elt.querySelector("input:checked")) event.preventDefault();
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
