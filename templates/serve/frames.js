// A stored report in its sandboxed frame, sized to its whole content: the page in the frame
// posts its height each time it changes (the service adds that script to it), and each frame takes the
// height only from its own window, whose sandbox gives it the opaque origin "null".
"use strict";
(function () {
  const MAX_HEIGHT = 200000;
  const frames = Array.from(document.querySelectorAll("iframe.report"));
  window.addEventListener("message", function (e) {
    const frame = frames.find(function (f) { return f.contentWindow === e.source; });
    if (!frame || e.origin !== "null") { return; }
    const h = e.data && e.data.traceanalyzerReportHeight;
    if (typeof h !== "number" || !isFinite(h) || h < 50) { return; }
    frame.style.height = Math.min(Math.ceil(h) + 2, MAX_HEIGHT) + "px";  // + its border
    frame.dataset.sized = "1";
  });
})();
