// The jq dashboard's only script: confirmations before actions, and the
// overview's auto-refresh with its pause. Pages work without it (actions
// then run without asking).
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (!live) return;
  const every = Number(live.getAttribute("data-refresh") || "5") * 1000;
  const key = "jq-dashboard-refresh-paused";
  let paused = window.localStorage.getItem(key) === "1";

  const label = () => {
    const toggle = document.getElementById("refresh-toggle");
    if (toggle) toggle.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
  };
  // The button is inside the refreshed part: one listener on the part.
  live.addEventListener("click", (event) => {
    if (event.target && event.target.id === "refresh-toggle") {
      paused = !paused;
      window.localStorage.setItem(key, paused ? "1" : "0");
      label();
    }
  });
  label();

  const refresh = async () => {
    if (paused || document.hidden) return;
    try {
      const response = await fetch(window.location.pathname, { headers: { Accept: "text/html" } });
      if (!response.ok) return;
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("live");
      // Paused while the request was out: keep what the operator froze.
      if (fresh && !paused) {
        live.replaceChildren(...fresh.childNodes);
        label();
      }
    } catch (_) {
      // The server is restarting or gone: keep the last figures, try again.
    }
  };
  window.setInterval(refresh, every);
});
