"use strict";
// Print everything: open every collapsed section before printing.
window.addEventListener("beforeprint", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
});
