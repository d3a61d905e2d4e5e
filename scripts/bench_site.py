#!/usr/bin/env python3
"""Time the built site in headless Chromium (a benchmark to run by hand, not a timed test).

Side by side in one run, each load in a fresh browser context (cold cache), in shuffled order:
  - the deck page: first contentful paint and time until the calculator is live (performance mark
    "calc:live", set by calculator.js once the worker's first answer is drawn), and until its sweep is
    drawn too (the second answer, mark "calc:ready");
  - a bare page on the same server whose module worker only runs stock Pyodide 314 (the npm
    package as published: full standard library, its own lock file) with `loadPyodide()` then `1+1`;
  - the site's worker alone: a blank page that starts the site's own calc-worker.mjs and asks it the
    page's first question (the default numbers), so what the deck page itself costs (its layout, Material's
    scripts, the search index, drawing the answer) is the difference between it and the deck page;
both on localhost and throttled to 10 Mbit/s down and up with 40 ms latency (Chrome DevTools
Protocol, Network.emulateNetworkConditions), with the bytes each load received (encoded as the server
sends it, as a host that serves precompressed files does: a `.br` sibling where Chromium takes Brotli,
else a `.gz` sibling or on-the-fly gzip); the deck page's bytes are measured once more from a gzip-only
server, so both figures stand side by side. Our time to live is reported as a ratio to the bare start in
the same condition.
With --snapshot, a third page measures Pyodide's memory snapshot (private options of pyodide 314):
a snapshot taken in this browser after `import calc.web`, served gzipped, restored by a worker that
then answers the page's first request; it is measured, not shipped (see CONTRIBUTING.md).
Then, on one live page, the latency from an input change to the redrawn chart (event "calc:drawn")
over many changes: median and p95; last the planner's time in the worker (event "calc:planned").

Aims: time to live at most 0.5x bare on localhost and 0.75x at 10 Mbit/s; at most 5.5 MB for the
calculator page with gzip, at most 5.0 MB with Brotli; update p95 under 50 ms.
Usage: python scripts/bench_site.py [--runs 7] [--changes 60] [--site site] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import brotli
import site_browser
from playwright.sync_api import sync_playwright

PYODIDE = site_browser.ROOT / "node_modules" / "pyodide"
BARE_PAGE = "__bench__/bare.html"
# Stock Pyodide, as `loadPyodide()` wants it beside pyodide.mjs: the runtime, full stdlib and lock file.
STOCK_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
BARE_HTML = """<!doctype html><meta charset="utf-8"><title>bare Pyodide</title>
<p>Starting Pyodide…</p>
<script>
const worker = new Worker("bare-worker.mjs", {type: "module"});
worker.onmessage = () => { performance.mark("calc:live"); document.body.dataset.state = "ready"; };
</script>"""
BARE_WORKER_JS = """import { loadPyodide } from "./pyodide/pyodide.mjs";
const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", import.meta.url).href });
postMessage(pyodide.runPython("1+1"));
"""
# The site's worker and nothing else: the deck page's first question, answered.
WORKER_PAGE = "__bench__/worker.html"
WORKER_HTML = """<!doctype html><meta charset="utf-8"><title>the site's worker alone</title>
<p>Starting the site's worker…</p>
<script>
const worker = new Worker("../javascripts/calc-worker.mjs", {type: "module"});
worker.onmessage = ({data}) => {
  if (data.type === "ready") worker.postMessage({id: 0, request: JSON.stringify({inputs: {}, sweep: false})});
  else if (data.answer) { performance.mark("calc:live"); document.body.dataset.state = "ready"; }
};
</script>"""
# The memory snapshot: taken once in the browser (after `import calc.web`), then restored per load.
MAKE_SNAPSHOT_HTML = """<!doctype html><meta charset="utf-8"><title>take a snapshot</title>
<p>Taking a memory snapshot…</p>
<script>
const worker = new Worker("make-snapshot-worker.mjs", {type: "module"});
worker.onmessage = async ({data}) => {
  await fetch("upload-snapshot", {method: "POST", body: data});
  document.body.dataset.state = "ready";
};
</script>"""
SITE_RUNTIME = """import { loadPyodide } from "../assets/pyodide/pyodide.mjs";
const assets = new URL("../assets/", import.meta.url);
const options = { indexURL: new URL("pyodide/", assets).href,
                  lockFileURL: new URL("wheels/pyodide-lock.json", assets).href };
"""
MAKE_SNAPSHOT_WORKER_JS = SITE_RUNTIME + """
// A snapshot refuses loaded packages (pyodide.loadedPackages must be empty): unpack the wheel instead.
// It does not keep the file system either, so calc.web must be imported (in memory) before it is taken.
const pyodide = await loadPyodide({ ...options, _makeSnapshot: true });
const lock = await (await fetch(options.lockFileURL)).json();
const wheel = await fetch(new URL(lock.packages.calc.file_name, options.lockFileURL));
pyodide.unpackArchive(await wheel.arrayBuffer(), "wheel");
pyodide.runPython("import calc.web");  // no proxy may be alive when the snapshot is taken
const snapshot = pyodide.makeMemorySnapshot();
postMessage(snapshot, [snapshot.buffer]);
"""
SNAPSHOT_HTML = BARE_HTML.replace("bare-worker.mjs", "snapshot-worker.mjs")
SNAPSHOT_WORKER_JS = SITE_RUNTIME + """
const snapshot = fetch(new URL("snapshot.bin", import.meta.url)).then((r) => r.arrayBuffer());
const pyodide = await loadPyodide({ ...options, _loadSnapshot: snapshot });
postMessage(pyodide.pyimport("calc.web").handle('{"inputs": {}, "sweep": true}').length);
"""
CONDITIONS = {  # name -> Network.emulateNetworkConditions parameters (None: no throttling)
    "localhost": None,
    "10 Mbit/s": {"offline": False, "latency": 40, "downloadThroughput": 10e6 / 8, "uploadThroughput": 10e6 / 8},
}
TIMINGS_JS = """() => ({
  fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null,
  live: performance.getEntriesByName("calc:live")[0]?.startTime ?? null,
  ready: performance.getEntriesByName("calc:ready")[0]?.startTime ?? null,
})"""
CHANGE_JS = """async ([name, value]) => {
  const root = document.querySelector("[data-calc]");
  const field = root.querySelector(`[name="${name}"]`);
  const drawn = new Promise(resolve => root.addEventListener("calc:drawn", resolve, {once: true}));
  let numbers = null;  // the table, the bars and the step's walk redrawn, before the sweep
  root.addEventListener("calc:numbers", () => { numbers = performance.now() - start; }, {once: true});
  const start = performance.now();
  field.value = value;
  field.dispatchEvent(new Event("input", {bubbles: true}));
  await drawn;
  return [performance.now() - start, numbers];
}"""


@contextlib.contextmanager
def bench_root(site: Path):
    """The built site plus __bench__/ (the bare page and stock Pyodide), as symlinks in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="bench-site-") as scratch:
        root = Path(scratch)
        for entry in site.iterdir():
            (root / entry.name).symlink_to(entry.resolve())
        bench = root / "__bench__"
        (bench / "pyodide").mkdir(parents=True)
        (bench / "bare.html").write_text(BARE_HTML)
        (bench / "bare-worker.mjs").write_text(BARE_WORKER_JS)
        (bench / "worker.html").write_text(WORKER_HTML)
        (bench / "make-snapshot.html").write_text(MAKE_SNAPSHOT_HTML)
        (bench / "make-snapshot-worker.mjs").write_text(MAKE_SNAPSHOT_WORKER_JS)
        (bench / "snapshot.html").write_text(SNAPSHOT_HTML)
        (bench / "snapshot-worker.mjs").write_text(SNAPSHOT_WORKER_JS)
        for name in STOCK_FILES:
            (bench / "pyodide" / name).symlink_to(PYODIDE / name)
            for suffix in (".gz", ".br"):  # the same siblings the site ships
                if (site / "assets" / "pyodide" / f"{name}{suffix}").is_file():
                    shipped = site / "assets" / "pyodide" / f"{name}{suffix}"
                    (bench / "pyodide" / f"{name}{suffix}").symlink_to(shipped.resolve())
        lock = (PYODIDE / "pyodide-lock.json").read_bytes()
        (bench / "pyodide" / "pyodide-lock.json.gz").write_bytes(gzip.compress(lock, 9, mtime=0))
        (bench / "pyodide" / "pyodide-lock.json.br").write_bytes(brotli.compress(lock, quality=11))  # as the site's
        yield root


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def take_snapshot(browser, base: str, root: Path) -> int:
    """Takes the memory snapshot in the browser and writes __bench__/snapshot.bin and its .gz; returns its size."""
    context = browser.new_context()
    got = []

    def upload(route):
        got.append(route.request.post_data_buffer)
        route.fulfill(body="ok")

    context.route("**/__bench__/upload-snapshot", upload)
    page = context.new_page()
    page.goto(base + "__bench__/make-snapshot.html")
    page.wait_for_selector("body[data-state=ready]", timeout=180_000)
    context.close()
    (root / "__bench__" / "snapshot.bin").write_bytes(got[0])
    (root / "__bench__" / "snapshot.bin.gz").write_bytes(gzip.compress(got[0], 6, mtime=0))
    return len(got[0])


def load(browser, url: str, ready_selector: str, throttle: dict | None) -> dict:
    """One cold load in a fresh context: FCP and time to live in ms since navigation start, and bytes received."""
    context = browser.new_context()
    page = context.new_page()
    received = []
    # a response from the browser cache reports a negative body size: nothing received
    page.on("requestfinished", lambda request: received.append(max(0, request.sizes()["responseBodySize"])))
    if throttle:
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.emulateNetworkConditions", throttle)
    page.goto(url)
    page.wait_for_selector(ready_selector, timeout=180_000)
    timings = page.evaluate(TIMINGS_JS)
    context.close()
    return {**timings, "bytes": sum(received)}


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
    return [total for total, _ in out], [numbers for _, numbers in out]


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
    parser.add_argument("--runs", type=int, default=7, help="cold loads of each page in each condition (default 7)")
    parser.add_argument("--changes", type=int, default=60, help="input changes timed (default 60, at least 50)")
    parser.add_argument("--site", type=Path, default=site_browser.SITE, help="the built site (default site/)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the loads' shuffled order")
    parser.add_argument("--snapshot", action="store_true", help="also measure a memory snapshot (not shipped)")
    args = parser.parse_args()

    pages = {"site": ("", "[data-calc][data-state=ready]"), "bare": (BARE_PAGE, "body[data-state=ready]"),
             "worker": (WORKER_PAGE, "body[data-state=ready]")}
    if args.snapshot:
        pages["snapshot"] = ("__bench__/snapshot.html", "body[data-state=ready]")
    plan = [(c, p) for c in CONDITIONS for p in pages] * args.runs
    random.Random(args.seed).shuffle(plan)  # interleaved: every variant sees the same machine load
    results: dict[tuple[str, str], list[dict]] = {key: [] for key in plan}
    with bench_root(args.site) as root, site_browser.serve(root) as base, sync_playwright() as p:
        browser = site_browser.launch(p)
        snapshot_bytes = take_snapshot(browser, base, root) if args.snapshot else None
        for i, (condition, name) in enumerate(plan):
            path, ready = pages[name]
            results[condition, name].append(load(browser, base + path, ready, CONDITIONS[condition]))
            print(f"  load {i + 1}/{len(plan)}: {name:8} {condition:9} {results[condition, name][-1]['live']:7.0f} ms",
                  file=sys.stderr, flush=True)
        with site_browser.serve(root, encodings=("gzip",)) as gzip_base:  # the same page from a gzip-only host
            gzip_bytes = [load(browser, gzip_base, pages["site"][1], None)["bytes"] for _ in range(2)]
        latencies, numbers = update_latencies(browser, base, max(args.changes, 50))
        plans = plan_times(browser, base)
        version = browser.version
        browser.close()

    report = {"chromium": version, "runs": args.runs, "conditions": {}, "site_bytes_gzip_only": min(gzip_bytes)}
    print(f"Chromium {version}, medians of {args.runs} cold loads each, shuffled")
    for condition in CONDITIONS:
        ours, bare = results[condition, "site"], results[condition, "bare"]
        live, bare_live = statistics.median(t["live"] for t in ours), statistics.median(t["live"] for t in bare)
        row = {
            "first_contentful_paint_ms": statistics.median(t["fcp"] for t in ours),
            "time_to_live_ms": live,
            "time_to_sweep_drawn_ms": statistics.median(t["ready"] for t in ours),
            "bare_pyodide_start_ms": bare_live,
            "live_ratio_to_bare": live / bare_live,
            "worker_alone_ms": statistics.median(t["live"] for t in results[condition, "worker"]),
            "site_bytes": statistics.median(t["bytes"] for t in ours),
            "bare_bytes": statistics.median(t["bytes"] for t in bare),
        }
        if args.snapshot:
            snap = results[condition, "snapshot"]
            row["snapshot_ms"] = statistics.median(t["live"] for t in snap)
            row["snapshot_ratio_to_bare"] = row["snapshot_ms"] / bare_live
            row["snapshot_bytes"] = statistics.median(t["bytes"] for t in snap)
        report["conditions"][condition] = row
        aim = {"localhost": 0.5, "10 Mbit/s": 0.75}[condition]
        print(f"{condition}:")
        print(f"  first contentful paint     {row['first_contentful_paint_ms']:8.0f} ms")
        print(f"  calculator live            {live:8.0f} ms   {row['site_bytes'] / 1e6:5.2f} MB received "
              f"(Brotli; {report['site_bytes_gzip_only'] / 1e6:.2f} MB from a gzip-only host)")
        print(f"  ... and its sweep drawn    {row['time_to_sweep_drawn_ms']:8.0f} ms")
        print(f"  bare Pyodide start         {bare_live:8.0f} ms   {row['bare_bytes'] / 1e6:5.2f} MB received")
        print(f"  live / bare                {row['live_ratio_to_bare']:8.2f}   (aim: <= {aim})")
        row["worker_alone_ratio_to_bare"] = row["worker_alone_ms"] / bare_live
        alone, alone_ratio = row["worker_alone_ms"], row["worker_alone_ratio_to_bare"]
        print(f"  the site's worker alone    {alone:8.0f} ms   {alone_ratio:.2f} x bare (a blank page)")
        if args.snapshot:
            print(f"  memory snapshot, 1st answer{row['snapshot_ms']:8.0f} ms   {row['snapshot_bytes'] / 1e6:5.2f} MB "
                  f"received, {row['snapshot_ratio_to_bare']:.2f} x bare (snapshot {snapshot_bytes / 1e6:.1f} MB raw)")
    report["update_ms"] = {"changes": len(latencies), "median": statistics.median(latencies),
                           "p95": percentile(latencies, 0.95), "max": max(latencies),
                           "numbers_median": statistics.median(numbers), "numbers_p95": percentile(numbers, 0.95)}
    report["plan_ms"] = {"questions": len(plans), "median": statistics.median(plans), "max": max(plans)}
    u, pl = report["update_ms"], report["plan_ms"]
    print(f"Input change -> redrawn chart over {u['changes']} changes (localhost)")
    print(f"  median {u['median']:.1f} ms, p95 {u['p95']:.1f} ms (aim: < 50), max {u['max']:.1f} ms")
    print(f"  (the table, bars and walk alone, before the sweep: median {u['numbers_median']:.1f} ms, "
          f"p95 {u['numbers_p95']:.1f} ms)")
    print(f"Planner (calc.plan in the worker, after the chart) over {pl['questions']} questions")
    print(f"  median {pl['median']:.1f} ms, max {pl['max']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
