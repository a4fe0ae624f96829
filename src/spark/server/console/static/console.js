// Spark console: the little every page shares. Copy buttons (data-copy: the id of the element whose
// text to copy), keep-alive countdowns (data-countdown: seconds left when the element was drawn), and
// the request count (#count, data-total) kept in step with the rows the live list adds (#rows), and the
// Runners page's list of models to load kept in step with its live table; the phone's Menu closes on
// Escape and on a tap outside it, as menus do (it opens and closes from its button without JavaScript).
// Copyright the Spark authors; part of Spark, same licence.
"use strict";

(function () {
  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return;
    }
    // plain http on another host has no clipboard API: copy a selection instead
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("[data-copy]");
    if (!button) return;
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    try {
      await copyText(source.textContent);
      button.textContent = "Copied";
    } catch (error) {
      button.textContent = "Select and copy";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 2000);
  });

  const menu = document.querySelector("details.menu-narrow");
  if (menu) {
    document.addEventListener("keydown", (event) => {
      if (event.key !== "Escape" || !menu.open) return;
      menu.open = false;
      menu.querySelector("summary").focus();
    });
    document.addEventListener("click", (event) => {
      if (menu.open && !menu.contains(event.target)) menu.open = false;
    });
  }

  function clock(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  // Requests: each live row is one more request, in the count as in the table.
  const count = document.querySelector("#count[data-total]"), rows = document.getElementById("rows");
  if (count && rows) {
    let total = Number(count.dataset.total);
    new MutationObserver((changes) => {
      let added = 0;
      for (const change of changes) {
        for (const node of change.addedNodes) if (node.nodeName === "TR") added += 1;
      }
      if (!added) return;
      total += added;
      count.dataset.total = String(total);
      const shown = rows.querySelectorAll(":scope > tr").length;
      count.querySelector(".count-figures").textContent = total + " request" + (total === 1 ? "" : "s") +
        (total > shown ? ", 1–" + shown + " shown" : "");
      const empty = document.getElementById("empty");
      if (empty) empty.hidden = true;
    }).observe(rows, { childList: true });
  }

  // Runners: the Load form's list says "(loaded)" of the models the live table shows loaded (kept in
  // step here, not drawn again by the server: that would lose the model chosen in it).
  const runners = document.getElementById("runners-table"), choices = document.getElementById("load-model-id");
  if (runners && choices) {
    new MutationObserver(() => {
      const loaded = new Set([...runners.querySelectorAll("tr[data-loaded]")].map((row) => row.dataset.model));
      for (const option of choices.options) {
        option.textContent = option.value + (loaded.has(option.value) ? " (loaded)" : "");
      }
    }).observe(runners, { childList: true, subtree: true });
  }

  setInterval(() => {
    const now = Date.now();
    for (const el of document.querySelectorAll("[data-countdown]")) {
      if (!el.dataset.drawnAt) el.dataset.drawnAt = String(now);
      const left = Number(el.dataset.countdown) - (now - Number(el.dataset.drawnAt)) / 1000;
      el.textContent = clock(left);
    }
  }, 1000);
})();
