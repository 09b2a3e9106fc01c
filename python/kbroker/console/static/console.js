// kbroker console: refreshes a page's live part without reloading it, and filters tables.
// No framework, no build step: the server renders every fragment (escaped), this script
// only swaps it in.
"use strict";

(function () {
  const live = document.getElementById("live");
  const status = document.getElementById("refresh-status");

  function applyFilters() {
    document.querySelectorAll("input[data-filter]").forEach(function (input) {
      const needle = input.value.trim().toLowerCase();
      document.querySelectorAll(input.dataset.filter).forEach(function (row) {
        const name = (row.dataset.name || "").toLowerCase();
        row.hidden = needle !== "" && row.dataset.name !== undefined && !name.includes(needle);
      });
    });
  }

  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    input.addEventListener("input", applyFilters);
  });

  let refreshes = 0;
  async function refresh() {
    if (document.hidden) return;
    const url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    try {
      const answer = await fetch(url, { headers: { Accept: "text/html" }, cache: "no-store" });
      const html = await answer.text();
      if (!answer.ok) {
        status.textContent = "refresh failed: HTTP " + answer.status;
        status.className = "refresh-status bad";
        return;
      }
      live.innerHTML = html;
      applyFilters();
      refreshes += 1;
      live.dataset.refreshes = String(refreshes);
      status.textContent = "updated " + new Date().toLocaleTimeString();
      status.className = "refresh-status";
    } catch (err) {
      status.textContent = "refresh failed: the console cannot be reached";
      status.className = "refresh-status bad";
    }
  }

  const seconds = live ? parseFloat(live.dataset.refresh || "0") : 0;
  if (seconds > 0) {
    window.setInterval(refresh, seconds * 1000);
  }
  applyFilters();
})();
