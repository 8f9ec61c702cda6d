// The upload page: drag and drop or pick files, send them with the token as a bearer header
// (a cross-site page cannot make the browser attach it), show progress, then open the run's page.
"use strict";
(function () {
  const form = document.getElementById("upload-form");
  const drop = document.getElementById("drop");
  const input = document.getElementById("file");
  const chosen = document.getElementById("chosen");
  const progress = document.getElementById("progress");
  const message = document.getElementById("message");
  let files = [];

  function show(list) {
    files = Array.from(list);
    chosen.textContent = files.map(function (f) { return f.name + " (" + f.size + " bytes)"; }).join(", ");
  }
  input.addEventListener("change", function () { show(input.files); });
  ["dragenter", "dragover"].forEach(function (name) {
    drop.addEventListener(name, function (e) { e.preventDefault(); drop.classList.add("over"); });
  });
  ["dragleave", "drop"].forEach(function (name) {
    drop.addEventListener(name, function (e) { e.preventDefault(); drop.classList.remove("over"); });
  });
  drop.addEventListener("drop", function (e) { if (e.dataTransfer) { show(e.dataTransfer.files); } });

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (!files.length) { message.textContent = "Choose or drop at least one file."; return; }
    const total = files.reduce(function (n, f) { return n + f.size; }, 0);
    if (total > Number(form.dataset.max)) { message.textContent = "Too large for this service's upload limit."; return; }
    const project = document.getElementById("project").value.trim();
    const query = new URLSearchParams();
    ["branch", "commit"].forEach(function (k) {
      const v = document.getElementById(k).value.trim();
      if (v) { query.set(k, v); }
    });
    const body = new FormData();
    files.forEach(function (f) { body.append("file", f, f.name); });
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/v1/projects/" + encodeURIComponent(project) + "/runs?" + query.toString());
    xhr.setRequestHeader("Authorization", "Bearer " + document.getElementById("token").value.trim());
    xhr.upload.addEventListener("progress", function (ev) {
      if (ev.lengthComputable) { progress.value = Math.round(100 * ev.loaded / ev.total); }
    });
    xhr.addEventListener("load", function () {
      let reply = {};
      try { reply = JSON.parse(xhr.responseText); } catch (err) { reply = {}; }
      if (xhr.status === 201 && reply.id) {
        message.textContent = "Uploaded: run " + reply.id + " is queued.";
        window.location.assign("/runs/" + encodeURIComponent(reply.id));
      } else {
        message.textContent = "Refused (" + xhr.status + "): " + (reply.error || "the upload failed");
        progress.hidden = true;
      }
    });
    xhr.addEventListener("error", function () {
      message.textContent = "The upload was cut off (too large, or the server went away).";
      progress.hidden = true;
    });
    progress.hidden = false;
    progress.value = 0;
    message.textContent = "Uploading…";
    xhr.send(body);
  });
})();
