// Refreshes the page's <main> in place every few seconds (its data-refresh),
// so that the numbers move without a reload. It waits while the tab is
// hidden, a button or field has the focus, or a form in it has been changed
// (a filter typed, a job ticked), and keeps the last good copy when a
// refresh fails.
(function () {
  "use strict";
  const main = document.querySelector("main[data-refresh]");
  if (!main) return;
  const every = Number(main.dataset.refresh) * 1000;
  const url = new URL(window.location.href);
  url.searchParams.delete("message");
  url.searchParams.set("part", "main");

  function changed(field) {
    if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
    if (field.tagName === "SELECT") {
      return field.selectedIndex !== Math.max(Array.from(field.options).findIndex(o => o.defaultSelected), 0);
    }
    return field.value !== field.defaultValue;
  }

  async function refresh() {
    const focused = document.activeElement;
    const busy = (focused && main.contains(focused) && /^(BUTTON|INPUT|SELECT|TEXTAREA)$/.test(focused.tagName)) ||
      Array.from(main.querySelectorAll("input, select, textarea")).some(changed);
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
