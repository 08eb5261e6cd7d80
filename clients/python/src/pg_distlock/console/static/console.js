// Refreshes the page's <main> in place every few seconds (its data-refresh),
// so that the numbers move without a reload. It waits while the tab is
// hidden or a button has the focus, and keeps the last good copy when a
// refresh fails.
(function () {
  "use strict";
  const main = document.querySelector("main[data-refresh]");
  if (!main) return;
  const every = Number(main.dataset.refresh) * 1000;
  const url = new URL(window.location.href);
  url.searchParams.delete("message");
  url.searchParams.set("part", "main");

  async function refresh() {
    const busy = document.activeElement && main.contains(document.activeElement) &&
      document.activeElement.tagName === "BUTTON";
    if (!document.hidden && !busy) {
      try {
        const response = await fetch(url, { headers: { Accept: "text/html" }, cache: "no-store" });
        if (response.ok) {
          main.innerHTML = await response.text();
          document.body.dataset.refreshed = String(Date.now());
        }
      } catch (error) {
        // The console or the database is away: try again next time.
      }
    }
    window.setTimeout(refresh, every);
  }
  window.setTimeout(refresh, every);
})();
