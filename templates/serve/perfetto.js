// The run page's "Open in Perfetto": the stored trace fetched from this service by the browser and handed to
// the Perfetto UI in a new tab by postMessage (its documented PING/PONG handshake); it goes to no one else.
"use strict";
(function () {
  const PERFETTO = "https://ui.perfetto.dev";
  const message = document.getElementById("perfetto-message");

  // the link back to the run goes to the Perfetto UI only when it is the service's public address
  // (--public-url), never the address this browser happens to use (an internal host name, a tunnel)
  function traceMessage(buffer, button) {
    const trace = {buffer: buffer, title: button.dataset.title, fileName: button.dataset.file};
    if (button.dataset.url) { trace.url = button.dataset.url; }
    return {perfetto: trace};
  }

  function handOver(ui, payload) {
    let tries = 0;
    function onPong(e) {
      if (e.source !== ui || e.origin !== PERFETTO || e.data !== "PONG") { return; }
      stop();
      ui.postMessage(payload, PERFETTO, [payload.perfetto.buffer]);
      message.textContent = "Opened in the Perfetto UI (its tab).";
    }
    function stop() {
      clearInterval(timer);
      window.removeEventListener("message", onPong);
    }
    // the channel is not buffered: PING until the UI, loaded, answers PONG (at most 30 s)
    const timer = setInterval(function () {
      if (ui.closed || ++tries > 600) {
        stop();
        message.textContent = "The Perfetto UI did not answer (closed, or not reachable from this browser).";
        return;
      }
      ui.postMessage("PING", PERFETTO);
    }, 50);
    window.addEventListener("message", onPong);
  }

  function open(button) {
    const ui = window.open(PERFETTO + "/#!/?referrer=traceanalyzer");  // at once: the click allows the new tab
    if (!ui) { message.textContent = "The browser blocked the new tab: allow pop-ups for this page."; return; }
    message.textContent = "Fetching the trace…";
    fetch(button.dataset.trace, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) { throw new Error("the service answered " + r.status); }
      return r.arrayBuffer();
    }).then(function (buffer) {
      message.textContent = "Waiting for the Perfetto UI…";
      handOver(ui, traceMessage(buffer, button));
    }).catch(function (err) {
      ui.close();
      message.textContent = "Could not fetch the trace: " + err.message;
    });
  }

  document.querySelectorAll("button.open-perfetto").forEach(function (button) {
    button.addEventListener("click", function () { open(button); });
  });
})();
