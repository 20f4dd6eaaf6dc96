"""HTML tables (escaped, optionally sortable by a click on a header) and the page's small scripts."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ..vocabulary.display import missing, num

Cell = Any  # a value, or (text, sort value)


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _cell(c: Cell, tag: str = "td") -> str:
    if isinstance(c, tuple) and len(c) == 2:
        text, key = c
        key_attr = "" if missing(key) else f' data-v="{esc(key)}"'
        return f"<{tag}{key_attr}>{esc(text)}</{tag}>"
    if isinstance(c, float) or isinstance(c, int) and not isinstance(c, bool):
        return f'<{tag} data-v="{esc(c)}">{esc(num(c))}</{tag}>'
    return f"<{tag}>{esc('-' if missing(c) else c)}</{tag}>"


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, cls: str = "", row_classes=None,
          table_id: str | None = None) -> str:
    if not rows:
        return "<p class='none'>Nothing to show.</p>"
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, r in enumerate(rows):
        rc = row_classes[i] if row_classes else ""
        body.append(f"<tr{f' class={chr(34)}{esc(rc)}{chr(34)}' if rc else ''}>{''.join(_cell(c) for c in r)}</tr>")
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return (f"<div class='scroll'><table{ident} class='{esc(cls)}'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>")


# Click a header of a `sortable` table: sort by that column (numbers by data-v, else text), click
# again to reverse.
SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var headers = table.querySelectorAll('thead th');
  headers.forEach(function (th, col) {
    th.title = 'sort';
    th.addEventListener('click', function () {
      // first click: largest first; the next one reverses
      var desc = th.getAttribute('data-sort') !== 'desc';
      headers.forEach(function (h) { h.removeAttribute('data-sort'); });
      th.setAttribute('data-sort', desc ? 'desc' : 'asc');
      var key = function (row) {
        var cell = row.cells[col];
        var v = cell ? cell.getAttribute('data-v') : null;
        return (v !== null && v !== '' && !isNaN(Number(v))) ? Number(v) : (cell ? cell.textContent : '');
      };
      var rows = Array.prototype.slice.call(table.tBodies[0].rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var nx = typeof x === 'number', ny = typeof y === 'number';
        if (nx !== ny) { return nx ? -1 : 1; }  // numbers first, '-' and text after them
        var r = nx ? x - y : String(x).localeCompare(String(y));
        return desc ? -r : r;
      });
      rows.forEach(function (r) { table.tBodies[0].appendChild(r); });
    });
  });
});
document.querySelectorAll('button.copy').forEach(function (button) {
  button.addEventListener('click', function () {
    var text = document.getElementById(button.getAttribute('data-target')).textContent;
    if (navigator.clipboard) {
      navigator.clipboard.writeText(text).then(function () { button.textContent = 'copied'; },
                                               function () { button.textContent = 'select and copy'; });
    }
  });
});
"""

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
nav a{margin-right:1em} .answer{font-size:1.15em;background:#eef6ee;border-left:4px solid #2ca02c;padding:.6em}
.warn{background:#fff4e5;border-left:4px solid #ff7f0e;padding:.5em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4} table.sortable th{cursor:pointer}
td[data-v]{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.scroll{overflow-x:auto}
tr.failed td{background:#fde8e8} tr.infeasible td{background:#fff4e5} tr.pick td{background:#e8f4e8}
pre{background:#f7f7f7;border:1px solid #ddd;padding:.6em;overflow-x:auto;font-size:12px}
.chart{margin:1em 0;min-width:0} .grid{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em}
@media (max-width:900px){.grid{grid-template-columns:1fr}}
details{margin:.4em 0} .none{color:#666}
table.fit{width:100%} table.fit td:last-child{white-space:normal;min-width:18em}
.sim-banner{background:#fdecea;border:2px solid #d62728;padding:.6em;font-size:1.05em}
"""
