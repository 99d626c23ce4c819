"use strict";
// Sorting and filtering of the findings table, in the page: no server, no network.
(function () {
  var table = document.getElementById("findings");
  if (!table) return;
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var text = document.getElementById("filter-text");
  var selects = {
    decision: document.getElementById("filter-decision"),
    routing: document.getElementById("filter-routing"),
    signed: document.getElementById("filter-signed")
  };
  var count = document.getElementById("shown-count");

  function apply() {
    var needle = text.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (row) {
      var ok = !needle || row.textContent.toLowerCase().indexOf(needle) >= 0;
      Object.keys(selects).forEach(function (key) {
        var want = selects[key].value;
        if (want && row.getAttribute("data-" + key) !== want) ok = false;
      });
      row.hidden = !ok;
      if (ok) shown += 1;
    });
    count.textContent = shown + " shown";
  }

  function sortBy(th) {
    var index = Array.prototype.indexOf.call(th.parentNode.children, th);
    var asc = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.children, function (h) {
      if (h.hasAttribute("aria-sort")) h.setAttribute("aria-sort", "none");
    });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    rows.sort(function (a, b) {
      var x = a.cells[index].getAttribute("data-value") || "";
      var y = b.cells[index].getAttribute("data-value") || "";
      var c = x.localeCompare(y, undefined, {numeric: true});
      return asc ? c : -c;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  table.querySelectorAll("button.sort").forEach(function (button) {
    button.addEventListener("click", function () { sortBy(button.parentNode); });
  });
  text.addEventListener("input", apply);
  Object.keys(selects).forEach(function (key) { selects[key].addEventListener("change", apply); });
  apply();
})();
