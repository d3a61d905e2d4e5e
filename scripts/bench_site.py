#!/usr/bin/env python3
"""Time the built site in headless Chromium (a benchmark to run by hand, not a timed test).

For the deck page, in fresh browser contexts (cold cache):
  - first contentful paint;
  - time until the calculator is live (performance mark "calc:live", set by calculator.js);
and, in the same run, a bare page on the same server that only starts Pyodide in a module
worker, the way the calculator does; our time-to-live is reported as a ratio to it.
Then, on one live page, the latency from an input change to the redrawn chart
(event "calc:drawn") over many changes: median and p95. Last, the planner's own time in the
worker (event "calc:planned") for a few questions; it runs after the chart, once input pauses.

Aims: update p95 under 50 ms; time-to-live at most 1.2x the bare Pyodide start.
Usage: python scripts/bench_site.py [--runs 5] [--changes 60] [--site site] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_browser
from playwright.sync_api import sync_playwright

BARE_PAGE = "__bench_bare__.html"
BARE_WORKER = "javascripts/__bench_bare_worker__.mjs"
# Served by the benchmark itself (Playwright routes on the same origin): Pyodide alone, no calc.
BARE_HTML = f"""<!doctype html><meta charset="utf-8"><title>bare Pyodide</title>
<p>Starting Pyodide…</p>
<script>
const worker = new Worker("{BARE_WORKER}", {{type: "module"}});
worker.onmessage = () => {{ performance.mark("calc:live"); document.body.dataset.state = "ready"; }};
</script>"""
BARE_WORKER_JS = """import { loadPyodide } from "../assets/pyodide/pyodide.mjs";
loadPyodide({ indexURL: new URL("../assets/pyodide/", import.meta.url).href }).then(() => postMessage("ready"));
"""
TIMINGS_JS = """() => ({
  fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null,
  live: performance.getEntriesByName("calc:live")[0]?.startTime ?? null,
})"""
CHANGE_JS = """async ([name, value]) => {
  const root = document.querySelector("[data-calc]");
  const field = root.querySelector(`[name="${name}"]`);
  const drawn = new Promise(resolve => root.addEventListener("calc:drawn", resolve, {once: true}));
  const start = performance.now();
  field.value = value;
  field.dispatchEvent(new Event("input", {bubbles: true}));
  await drawn;
  return performance.now() - start;
}"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def load(browser, url: str, ready_selector: str) -> dict:
    """One cold load in a fresh context: FCP and time to live, in ms since navigation start."""
    context = browser.new_context()
    context.route(f"**/{BARE_PAGE}", lambda route: route.fulfill(body=BARE_HTML, content_type="text/html"))
    context.route(f"**/{BARE_WORKER}", lambda route: route.fulfill(body=BARE_WORKER_JS, content_type="text/javascript"))
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector(ready_selector, timeout=120_000)
    timings = page.evaluate(TIMINGS_JS)
    context.close()
    return timings


def update_latencies(browser, url: str, changes: int) -> list[float]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=120_000)
    for value in ("2048", "4096"):  # warm-up: the first calls compile Python code paths
        page.evaluate(CHANGE_JS, ["seq", value])
    fields = [("seq", str(1024 + 128 * i)) if i % 3 else ("micro-batch", str(1 + i % 8)) for i in range(changes)]
    out = [page.evaluate(CHANGE_JS, list(change)) for change in fields]
    context.close()
    return out


PLAN_JS = """async ([name, value]) => {
  const root = document.querySelector("[data-calc]");
  const field = root.querySelector(`[name="${name}"]`);
  const planned = new Promise(resolve =>
    root.addEventListener("calc:planned", e => resolve(e.detail.ms), {once: true}));
  field.value = value;
  field.dispatchEvent(new Event("input", {bubbles: true}));
  return await planned;
}"""
# The planner's questions: (field, value) changes, each answered by calc.plan in the worker.
PLAN_CHANGES = [("global-batch", "512"), ("global-batch", "2048"), ("preset", "llama-2-13b"),
                ("preset", "llama-2-70b"), ("global-batch", "1024"), ("capacity-gb", "40"),
                ("preset", "llama-7b"), ("capacity-gb", "141"), ("seq", "8192"), ("global-batch", "4096")]


def plan_times(browser, url: str) -> list[float]:
    """The worker's round trip for each planner question (calc.plan in Pyodide plus the JSON), in ms."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=120_000)
    out = [page.evaluate(PLAN_JS, list(change)) for change in PLAN_CHANGES]
    context.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="cold loads of each page (default 5)")
    parser.add_argument("--changes", type=int, default=60, help="input changes timed (default 60, at least 50)")
    parser.add_argument("--site", type=Path, default=site_browser.SITE, help="the built site (default site/)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()

    with site_browser.serve(args.site) as base, sync_playwright() as p:
        browser = site_browser.launch(p)
        ours, bare = [], []
        for _ in range(args.runs):  # alternate, so both see the same machine load
            ours.append(load(browser, base, "[data-calc][data-state=ready]"))
            bare.append(load(browser, base + BARE_PAGE, "body[data-state=ready]"))
        latencies = update_latencies(browser, base, max(args.changes, 50))
        plans = plan_times(browser, base)
        version = browser.version
        browser.close()

    live = statistics.median(t["live"] for t in ours)
    bare_live = statistics.median(t["live"] for t in bare)
    report = {
        "chromium": version,
        "runs": args.runs,
        "first_contentful_paint_ms": statistics.median(t["fcp"] for t in ours),
        "time_to_live_ms": live,
        "bare_pyodide_start_ms": bare_live,
        "live_ratio_to_bare": live / bare_live,
        "update_ms": {"changes": len(latencies), "median": statistics.median(latencies),
                      "p95": percentile(latencies, 0.95), "max": max(latencies)},
        "plan_ms": {"questions": len(plans), "median": statistics.median(plans), "max": max(plans)},
    }
    print(f"Chromium {version}, medians of {args.runs} cold loads")
    print(f"  first contentful paint     {report['first_contentful_paint_ms']:8.0f} ms")
    print(f"  calculator live            {live:8.0f} ms")
    print(f"  bare Pyodide start         {bare_live:8.0f} ms")
    print(f"  live / bare                {report['live_ratio_to_bare']:8.2f}   (aim: <= 1.2)")
    u = report["update_ms"]
    print(f"Input change -> redrawn chart over {u['changes']} changes")
    print(f"  median {u['median']:.1f} ms, p95 {u['p95']:.1f} ms (aim: < 50), max {u['max']:.1f} ms")
    pl = report["plan_ms"]
    print(f"Planner (calc.plan in the worker, after the chart) over {pl['questions']} questions")
    print(f"  median {pl['median']:.1f} ms, max {pl['max']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
