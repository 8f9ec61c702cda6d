// The history page: a point is a link to its run; with "Compare" ticked, the first click picks a run and
// the second opens the compare page of the two (the earlier of the two is the base).
"use strict";
(function () {
  const mode = document.getElementById("compare-mode");
  const picked = document.getElementById("picked");
  const order = [];
  document.querySelectorAll("#chart-verdict a.pt").forEach(function (a) { order.push(a.dataset.run); });
  let first = null;

  function mark(run, on) {
    document.querySelectorAll("a.pt").forEach(function (a) {
      if (a.dataset.run === run) { a.classList.toggle("picked", on); }
    });
  }
  mode.addEventListener("change", function () {
    if (first) { mark(first, false); }
    first = null;
    picked.textContent = mode.checked ? "pick the first run" : "";
  });
  document.querySelectorAll("a.pt").forEach(function (a) {
    a.addEventListener("click", function (e) {
      if (!mode.checked) { return; }  // a plain link: opens the run
      e.preventDefault();
      const run = a.dataset.run;
      if (first === null || first === run) {
        if (first) { mark(first, false); }
        first = run;
        mark(run, true);
        picked.textContent = "base or head: " + run + "; pick the second run";
        return;
      }
      const pair = order.indexOf(first) <= order.indexOf(run) ? [first, run] : [run, first];
      window.location.assign("/compare?base=" + encodeURIComponent(pair[0]) + "&head=" + encodeURIComponent(pair[1]));
    });
  });
})();
