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

// The lag chart of a group's page: the console's samples of the last hour (uPlot),
// fetched again at each refresh.
(function () {
  const box = document.getElementById("lag-chart");
  if (!box || typeof window.uPlot !== "function") return;
  const seconds = parseFloat(document.getElementById("live").dataset.refresh || "0");
  let chart = null;

  function series(points) {
    return [points.map((p) => p[0]), points.map((p) => p[1])];
  }

  async function draw() {
    const url = "/api/lag?group=" + encodeURIComponent(box.dataset.group);
    let answer;
    try {
      answer = await fetch(url, { cache: "no-store" });
    } catch (err) {
      return;
    }
    if (!answer.ok) return;
    const points = (await answer.json()).points;
    box.dataset.points = String(points.length);
    box.dataset.last = points.length ? String(points[points.length - 1][1]) : "";
    if (chart === null) {
      chart = new window.uPlot(
        {
          width: Math.max(320, (box.clientWidth || 800) - 8),
          height: 220,
          scales: { y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
          series: [{}, { label: "lag", stroke: "#1f5fa8", width: 2, fill: "rgba(31,95,168,0.08)" }],
        },
        series(points),
        box,
      );
    } else {
      chart.setData(series(points));
    }
  }

  draw();
  if (seconds > 0) window.setInterval(draw, seconds * 1000);
})();
