// Reckon console: behaviour the Content-Security-Policy allows (no inline script, no eval).
// The queue polls every 15 s (hx-trigger on #results) but skips a poll while the tab is hidden
// or while the operator has ticked calls for a bulk action, so a refresh never drops a selection.
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail.elt;
  if (elt.id !== "results") return;  // the poll itself; links and forms inside have their own elt
  if (document.visibilityState !== "visible" || elt.querySelector("input:checked")) event.preventDefault();
});
