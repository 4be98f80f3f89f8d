"""The console's stylesheet and script, served from the package at ``/static/…`` (the pages load
nothing from the internet, and the Content-Security-Policy allows nothing else)."""

from __future__ import annotations

CSS = """
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
header { background: #1d2330; color: #fff; padding: 0.5rem 1rem; display: flex; gap: 1.2rem; align-items: center; }
header a { color: #cfe0ff; text-decoration: none; }
header .stack { margin-left: auto; color: #9aa5b8; font-size: 0.85rem; }
main { padding: 1rem; }
h1 { font-size: 1.3rem; margin: 0.2rem 0 0.8rem; }
h2 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
table { border-collapse: collapse; background: #fff; width: 100%; font-size: 0.88rem; }
th, td { border: 1px solid #dde1e8; padding: 0.25rem 0.45rem; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
pre { background: #fff; border: 1px solid #dde1e8; padding: 0.5rem; white-space: pre-wrap; word-break: break-word; }
.note { background: #fff8e1; border: 1px solid #f0d58a; padding: 0.5rem; margin: 0.5rem 0; }
.error { background: #fdecea; border: 1px solid #f5b7b1; padding: 0.5rem; margin: 0.5rem 0; }
.ok { background: #e8f5e9; border: 1px solid #a5d6a7; padding: 0.5rem; margin: 0.5rem 0; }
.counts { display: flex; gap: 1.5rem; flex-wrap: wrap; }
.counts table { width: auto; }
form.filters { display: flex; gap: 0.6rem; flex-wrap: wrap; align-items: end; margin-bottom: 0.6rem; }
form.filters label { display: flex; flex-direction: column; font-size: 0.8rem; }
.timeline td:last-child, table.attempts td, table.deliveries td { white-space: pre-wrap; }
.kind-failure td { background: #fdecea; }
.kind-delivery td { background: #e8f5e9; }
.kind-outcome td { font-weight: bold; }
.muted { color: #6b7689; font-size: 0.85rem; }
svg text { font-size: 10px; fill: #1d2330; }
textarea { width: 100%; font-family: monospace; }
button { cursor: pointer; }
"""

JS = """
// select every message shown; keep the redrive/delete buttons' count in step (the server's
// confirmation page states the exact count again before anything moves)
document.addEventListener('DOMContentLoaded', function () {
  var all = document.getElementById('select-all');
  var boxes = function () { return Array.prototype.slice.call(document.querySelectorAll('input.pick')); };
  var sync = function () {
    var n = boxes().filter(function (b) { return b.checked; }).length;
    Array.prototype.forEach.call(document.querySelectorAll('.picked-count'), function (el) { el.textContent = String(n); });
  };
  if (all) { all.addEventListener('change', function () { boxes().forEach(function (b) { b.checked = all.checked; }); sync(); }); }
  boxes().forEach(function (b) { b.addEventListener('change', sync); });
  sync();
});

// the opt-in auto-refresh (a page with #auto-refresh, i.e. ?refresh=1): reload every N seconds,
// but never while a form is being filled (a field focused or changed, a message ticked)
document.addEventListener('DOMContentLoaded', function () {
  var marker = document.getElementById('auto-refresh');
  if (!marker) { return; }
  var seconds = parseInt(marker.getAttribute('data-seconds'), 10) || 30;
  var touched = false;
  document.addEventListener('input', function () { touched = true; }, true);
  document.addEventListener('change', function () { touched = true; }, true);
  var busy = function () {
    var active = document.activeElement;
    var filling = active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    return touched || filling || document.querySelectorAll('input.pick:checked').length > 0;
  };
  var tick = function () {
    if (busy()) { marker.setAttribute('data-paused', 'a form is being filled'); setTimeout(tick, seconds * 1000); return; }
    window.location.reload();
  };
  setTimeout(tick, seconds * 1000);
});
"""
