/* The leaderboard's sorting and filtering, in plain JavaScript.
 *
 * Why no table library: the two features are a few dozen lines, and these lines are all there is to
 * review, pin and keep working from file:// under the pages' Content-Security-Policy (this file is
 * the only script it allows). A library would bring more code than the feature, a version and a
 * licence to track, and nothing the board needs. Without JavaScript the tables are still there, in
 * rank order, and the filter controls stay hidden.
 *
 * The page gives the numbers: each cell's data-sort is the value it sorts by (hours, dollars, ms,
 * not "0:45:00" or "$1,234.50"), empty where the row has none; each row's data-hardware,
 * data-hardwareclass, data-framework, data-verification and data-reproduction are what the filters
 * read (a select's value matches the whole attribute, any case; a text box any part of it). A number
 * heading's data-better says which values are better ("higher" for an accuracy, "lower" for a time,
 * a cost, an error rate): its first click puts the best first, the next turns the order round.
 */
"use strict";
(function () {
  function value(cell, type) {
    const raw = cell ? (cell.dataset.sort ?? cell.textContent).trim() : "";
    if (raw === "") return null;
    if (type !== "num") return raw.toLowerCase();
    const n = Number(raw);
    return Number.isNaN(n) ? null : n;
  }

  function sort(th) {
    const headers = Array.from(th.parentNode.children);
    const column = headers.indexOf(th);
    const type = th.dataset.type;
    const now = th.getAttribute("aria-sort");
    const ascending = now ? now !== "ascending" : th.dataset.better !== "higher";
    const body = th.closest("table").tBodies[0];
    const rows = Array.from(body.rows).filter((row) => row.dataset.entry !== undefined);
    const rank = (row) => Number(row.cells[0].dataset.sort);
    rows.sort((a, b) => {
      const x = value(a.cells[column], type), y = value(b.cells[column], type);
      if (x === null || y === null) {
        return (x === null) - (y === null) || rank(a) - rank(b);    // a missing value goes last, either way
      }
      const order = x < y ? -1 : x > y ? 1 : 0;
      return (ascending ? order : -order) || rank(a) - rank(b);     // ties keep the board's order
    });
    rows.forEach((row) => body.appendChild(row));
    headers.forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function filter(form) {
    const wanted = Array.from(form.querySelectorAll("[data-filter]"))
      .map((control) => [control.dataset.filter, control.value.trim().toLowerCase(), control.tagName === "SELECT"])
      .filter(([, wants]) => wants !== "");
    let shown = 0, total = 0;
    form.closest("section").querySelectorAll("table.ranking tbody tr[data-entry]").forEach((row) => {
      const keep = wanted.every(([name, wants, exact]) => {
        const has = row.dataset[name];
        if (has === undefined) return true;       // a table without that column (reproduction: training only)
        return exact ? has.toLowerCase() === wants : has.toLowerCase().includes(wants);
      });
      row.hidden = !keep;
      total += 1;
      shown += keep;
    });
    form.querySelector("output").textContent = shown === total ? `${total} rows` : `${shown} of ${total} rows shown`;
  }

  document.querySelectorAll("table.ranking th > button").forEach((button) => {
    button.addEventListener("click", () => sort(button.parentNode));
  });
  document.querySelectorAll("form.filters").forEach((form) => {
    // a select may report its choice only as "change" (as when a script or a driver picks the option)
    ["input", "change"].forEach((type) => form.addEventListener(type, () => filter(form)));
    form.addEventListener("submit", (event) => event.preventDefault());
    form.hidden = false;
  });
})();
