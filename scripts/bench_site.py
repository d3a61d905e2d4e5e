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
Then, on one live page, the latency from an input change to the redrawn chart (event "calc:drawn") over many
changes: median and p95, once with the changes coming at once and once after the reader's pause of
READ_PAUSE_S (the page's worker uses an idle page to warm its code: calc-worker.mjs). Then, on llama-2-70b:
the planner's time in the page (event "calc:planned": the question sent, the layouts and the fit list
answered), and an input change redrawn while the planner works (its question in the worker) beside one redrawn
while it is idle, pair by pair on the same page; and how many Pyodide runtimes the pages started (calc
workers, fetches of the WebAssembly), which must be one each.

Aims (issue 21): time to live at most 0.5x bare on localhost and 0.7x at 10 Mbit/s; at most 5.0 MB for
the calculator page with Brotli; input-to-chart p95 under 30 ms; a redraw while the planner works at most
1.5x an idle one (medians); the planner's median under 50 ms.
With --baseline DIR, another build of the site (before a change, say) is served beside this one and its
deck page loaded in the same shuffled order: on a machine whose load drifts, before and after side by side.
Each input change is also split in four phases, from its performance marks: the numbers' answer in
(calc:answered), the numbers drawn (calc:numbers), the sweep's answer in (calc:swept), the sweep drawn
(calc:drawn); --latency-only prints them alone.
--trace N shows where the deck page's time goes until calc:live, from Chromium's trace of N cold loads:
the CPU time of each thread (the page's main thread, calc's worker, Material's search worker, the
background threads that compile the WebAssembly), the main thread's by kind of work (style, layout,
paint, each script), and when each request started and ended.
Usage: python scripts/bench_site.py [--runs 7] [--changes 60] [--site site] [--json out.json]
       python scripts/bench_site.py --quick   # 2 loads of each, 20 changes, 8 plans: a few minutes, rough
       python scripts/bench_site.py --quick --baseline /tmp/site-before   # another build beside this one
       python scripts/bench_site.py --planner-only --pairs 16   # the planner's pairs alone, on a busy machine
       python scripts/bench_site.py --latency-only --changes 40   # input to chart, phase by phase
       python scripts/bench_site.py --trace 3 [--throttled]   # where the start-up's time goes
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import brotli
import site_browser
from playwright.sync_api import sync_playwright

PYODIDE = site_browser.ROOT / "node_modules" / "pyodide"
BARE_PAGE = "__bench__/bare.html"
BASELINE_PAGE = "__baseline__"  # --baseline: another build's deck page, loaded beside this one's
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
  const end = performance.now();
  const at = (name) => (performance.getEntriesByName(name).at(-1)?.startTime ?? NaN) - start;
  return [end - start, numbers, ["calc:answered", "calc:numbers", "calc:swept"].map(at)];
}"""


@contextlib.contextmanager
def bench_root(site: Path, baseline: Path | None = None):
    """The built site plus __bench__/ (the bare page and stock Pyodide), and `baseline` (another build of the
    site, to compare with) under __baseline__/, as symlinks in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="bench-site-") as scratch:
        root = Path(scratch)
        for entry in site.iterdir():
            (root / entry.name).symlink_to(entry.resolve())
        if baseline:
            (root / BASELINE_PAGE).mkdir()
            for entry in baseline.iterdir():
                (root / BASELINE_PAGE / entry.name).symlink_to(entry.resolve())
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
            shipped = site / "assets" / "pyodide" / name
            if not shipped.is_file() or shipped.read_bytes() != (PYODIDE / name).read_bytes():
                continue  # the site's own file (its cut standard library): its siblings are not stock Pyodide's
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
    finished = []
    page.on("requestfinished", lambda request: finished.append(request))
    if throttle:
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.emulateNetworkConditions", throttle)
    page.goto(url)
    page.wait_for_selector(ready_selector, timeout=180_000)
    timings = page.evaluate(TIMINGS_JS)
    # What the page asks for once live counts too (Material's bundle and search index wait for the first
    # answer); a response from the browser cache reports a negative body size: nothing received.
    page.wait_for_load_state("networkidle")
    received = sum(max(0, request.sizes()["responseBodySize"]) for request in finished)
    context.close()
    return {**timings, "bytes": received}


def runtime_counter(page) -> Callable[[], int]:
    """How many Pyodide runtimes the page has started so far: its calc workers, and its fetches of the
    WebAssembly (as tests/site/site_fixtures.py's Recorder counts them)."""
    workers, wasm = [], []
    page.on("worker", lambda worker: workers.append(worker.url.split("?")[0].endswith("/calc-worker.mjs")))
    page.on("request", lambda request: wasm.append(request.url.split("?")[0].endswith("/pyodide.asm.wasm")))
    return lambda: max(sum(workers), sum(wasm))


PHASES = ("the numbers' answer in (input to calc:answered)", "the numbers drawn (to calc:numbers)",
          "the sweep's answer in (to calc:swept)", "the sweep drawn (to calc:drawn)")


def phases_of(total: float, marks: list[float]) -> list[float]:
    """A change's four phases (PHASES, ms), from its marks' times since the input."""
    answered, numbers, swept = marks
    return [answered, numbers - answered, swept - numbers, total - swept]


# A reader's pause between the calculator going live and the first change: the other latency figure's changes
# come at once, while Chromium still optimises the WebAssembly the changes run (calc-worker.mjs, WARM_RUNS).
READ_PAUSE_S = 2.0


def update_latencies(browser, url: str, changes: int, pause: float = 0.0) -> tuple[list[float], list[float], int,
                                                                                     list[list[float]]]:
    """(input change to redrawn chart, to the numbers alone, runtimes started, each change's phases) over
    `changes` on the default page, the first `pause` seconds after it is live."""
    context = browser.new_context()
    page = context.new_page()
    runtimes = runtime_counter(page)
    page.goto(url)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=120_000)
    page.wait_for_timeout(pause * 1000)
    for value in ("2048", "4096"):  # warm-up: the first calls compile Python code paths
        page.evaluate(CHANGE_JS, ["seq", value])
    fields = [("seq", str(1024 + 128 * i)) if i % 3 else ("micro-batch", str(1 + i % 8)) for i in range(changes)]
    out = [page.evaluate(CHANGE_JS, list(change)) for change in fields]
    started = runtimes()
    context.close()
    return ([total for total, _, _ in out], [numbers for _, numbers, _ in out], started,
            [phases_of(total, marks) for total, _, marks in out])


def latency_only(site: Path, changes: int, pause: float) -> int:
    """--latency-only: `changes` input changes on a live page, each split into PHASES (median / p95)."""
    with bench_root(site) as root, site_browser.serve(root) as base, sync_playwright() as p:
        browser = site_browser.launch(p)
        totals, numbers, _, phases = update_latencies(browser, base, changes, pause)
        browser.close()
    print(f"{changes} changes, the first {pause:g} s after live: input to chart {statistics.median(totals):.1f} / "
          f"{percentile(totals, 0.95):.1f} ms "
          f"(median / p95), the numbers alone {statistics.median(numbers):.1f} / {percentile(numbers, 0.95):.1f}")
    for i, name in enumerate(PHASES):
        column = [p[i] for p in phases]
        print(f"  {name:48} {statistics.median(column):6.1f} / {percentile(column, 0.95):6.1f}")
    return 0


# One sample on a live page: optionally a change that sets the planner working (`before`: resolved once its
# question is in the worker, data-plan-busy), then `change`, timed to the redrawn chart; then the planner's
# time for the question `change` leaves (event calc:planned, once the reader has paused).
SAMPLE_JS = """async ([change, before]) => {
  const root = document.querySelector("[data-calc]");
  const planner = root.querySelector("[data-planner]");
  const set = ([name, value]) => {
    const field = root.querySelector(`[name="${name}"]`);
    field.value = value;
    field.dispatchEvent(new Event("input", {bubbles: true}));
  };
  if (before) {
    const busy = new Promise(resolve => {
      const watch = new MutationObserver(() => { if (planner.dataset.planBusy) { watch.disconnect(); resolve(); } });
      watch.observe(planner, {attributes: true, attributeFilter: ["data-plan-busy"]});
    });
    set(before);
    await busy;
  }
  const planning = Boolean(planner.dataset.planBusy);
  const drawn = new Promise(resolve => root.addEventListener("calc:drawn", resolve, {once: true}));
  const planned = new Promise(resolve =>
    root.addEventListener("calc:planned", e => resolve(e.detail.ms), {once: true}));
  const start = performance.now();
  set(change);
  await drawn;
  const redraw = performance.now() - start;
  return [redraw, await planned, planning];
}"""
PLANNER_PRESET = "llama-2-70b"  # the planner figure: 80 layers, the layouts of a 70B model


def planner_session(browser, url: str, samples: int) -> dict:
    """On PLANNER_PRESET: pairs of input changes, one redrawn with the planner idle, one while its question
    is in the worker; the planner's answer times; the runtimes the page started."""
    context = browser.new_context()
    page = context.new_page()
    runtimes = runtime_counter(page)
    page.goto(url)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=120_000)
    page.evaluate(SAMPLE_JS, [["preset", PLANNER_PRESET], None])  # warm-up: the preset, its first plan
    page.evaluate(SAMPLE_JS, [["seq", "2048"], None])
    idle, busy, plans = [], [], []
    for i in range(samples):
        redraw, ms, _ = page.evaluate(SAMPLE_JS, [["seq", str(1024 + 256 * i)], None])
        idle.append(redraw)
        plans.append(ms)
        before = ["global-batch", "512" if i % 2 else "2048"]
        redraw, ms, planning = page.evaluate(SAMPLE_JS, [["seq", str(1152 + 256 * i)], before])
        assert planning, "the planner was not working when the change came"
        busy.append(redraw)
        plans.append(ms)
    started = runtimes()
    context.close()
    return {"idle": idle, "busy": busy, "plans": plans, "runtimes": started}


# --trace: where the deck page's time goes until "calc:live", from Chromium's own trace of one cold load.
TRACE_CATEGORIES = ["devtools.timeline", "disabled-by-default-devtools.timeline", "blink.user_timing", "toplevel",
                    "v8.execute"]
SCRIPT_EVENTS = {"EvaluateScript", "v8.compile", "v8.compileModule", "v8.evaluateModule", "FunctionCall",
                 "TimerFire", "EventDispatch", "FireAnimationFrame", "HandlePostMessage"}
RENDER_EVENTS = {"ParseHTML", "UpdateLayoutTree", "Layout", "Paint", "PrePaint", "Layerize", "ParseAuthorStyleSheet",
                 "Commit", "HitTest"}


def trace_load(browser, url: str, throttle: dict | None) -> dict:
    """One cold load of the deck page, traced: its events, the renderer's pid, navigation start and calc:live (us)."""
    context = browser.new_context()
    page = context.new_page()
    if throttle:
        cdp = context.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.emulateNetworkConditions", throttle)
    browser.start_tracing(page=page, categories=TRACE_CATEGORIES)
    page.goto(url)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=180_000)
    events = json.loads(browser.stop_tracing())["traceEvents"]
    context.close()
    nav = next(e for e in events if e["name"] == "navigationStart"
               and e["args"]["data"].get("documentLoaderURL", "").startswith("http"))
    live = next(e["ts"] for e in events if e["name"] == "calc:live" and e["pid"] == nav["pid"])
    return {"events": events, "pid": nav["pid"], "t0": nav["ts"], "live": live}


def thread_cpu(trace: dict) -> dict[str, float]:
    """CPU time (ms, the trace's thread time) each of the renderer's threads spent before calc:live: the page's
    main thread, calc's worker (the thread that fetched pyodide.mjs), Material's search worker, and the
    background threads (WebAssembly compilation, mostly)."""
    pid, t0, live, events = trace["pid"], trace["t0"], trace["live"], trace["events"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
             and e["pid"] == pid}
    calc = next(e["tid"] for e in events if e["name"] == "ResourceSendRequest" and e["pid"] == pid
                and e["args"]["data"]["url"].endswith("/pyodide.mjs"))
    kind = {tid: ("page" if tid == pid else "calc worker" if tid == calc else "search worker"
                  if name == "DedicatedWorker thread" else "background threads" if name.startswith("ThreadPool")
                  else "other") for tid, name in names.items()}
    out: dict[str, float] = dict.fromkeys(("page", "calc worker", "search worker", "background threads", "other"), 0)
    ends: dict[int, float] = {}
    for e in sorted((e for e in events if e["pid"] == pid and e["ph"] == "X" and "dur" in e and t0 <= e["ts"] < live),
                    key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= ends.get(e["tid"], -1):  # a top-level event of its thread
            ends[e["tid"]] = e["ts"] + e["dur"]
            out[kind.get(e["tid"], "other")] += e.get("tdur", 0) / 1e3
    return out


def main_thread_work(trace: dict) -> dict[str, float]:
    """The page's main thread before calc:live, CPU ms by kind of work: parsing, style, layout, paint, each
    script by its file (what a script's call forces, a layout say, counted as the layout), and the rest."""
    pid, t0, live = trace["pid"], trace["t0"], trace["live"]
    own = sorted((e for e in trace["events"] if e["pid"] == pid and e["tid"] == pid and e["ph"] == "X"
                  and "dur" in e and t0 <= e["ts"] < live), key=lambda e: (e["ts"], -e["dur"]))
    stack: list[tuple[dict, str]] = []
    work: dict[str, float] = {}
    for e in own:
        while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
            stack.pop()
        above = stack[-1][1] if stack else "other tasks"
        data = (e.get("args") or {}).get("data") or {}
        url = str(data.get("url") or "").split("?")[0]
        label = (f"script {url.rsplit('/', 1)[-1]}" if e["name"] in SCRIPT_EVENTS and url
                 else "ES modules run (the calculator's mount)" if e["name"] == "v8.evaluateModule"
                 else e["name"] if e["name"] in RENDER_EVENTS else "GC" if "GC" in e["name"] else above)
        cpu = e.get("tdur", 0) / 1e3
        if stack:
            work[above] = work.get(above, 0) - cpu  # its parent's own time excludes it
        work[label] = work.get(label, 0) + cpu
        stack.append((e, label))
    return work


def request_times(trace: dict) -> list[tuple[str, str, float, float, int]]:
    """Each request before calc:live: (file, the thread that asked, start and end in ms since navigation, bytes)."""
    pid, t0 = trace["pid"], trace["t0"]
    sent, done = {}, {}
    for e in trace["events"]:
        if e["pid"] != pid or e["name"] not in ("ResourceSendRequest", "ResourceFinish"):
            continue
        data = e["args"]["data"]
        if e["name"] == "ResourceSendRequest":
            sent[data["requestId"]] = (data["url"].split("?")[0].rsplit("/", 1)[-1] or "(the page)",
                                       "page" if e["tid"] == pid else "worker", (e["ts"] - t0) / 1e3)
        else:
            done[data["requestId"]] = ((e["ts"] - t0) / 1e3, data.get("encodedDataLength", 0))
    rows = [(*sent[r], *done.get(r, (float("nan"), 0))) for r in sent]
    return sorted((r for r in rows if r[2] < (trace["live"] - t0) / 1e3), key=lambda r: r[2])


def trace_report(site: Path, loads: int, condition: str) -> int:
    """--trace: `loads` traced cold loads of the deck page; the medians of each thread's CPU time and of the main
    thread's work before calc:live, then the last load's requests."""
    with bench_root(site) as root, site_browser.serve(root) as base, sync_playwright() as p:
        browser = site_browser.launch(p)
        traces = [trace_load(browser, base, CONDITIONS[condition]) for _ in range(loads)]
        browser.close()
    lives = [(t["live"] - t["t0"]) / 1e3 for t in traces]
    print(f"{condition}, {loads} traced loads: calc:live at {statistics.median(lives):.0f} ms (median)")
    print("CPU ms before calc:live, by thread (medians):")
    cpus = [thread_cpu(t) for t in traces]
    for name in cpus[0]:
        print(f"  {name:20} {statistics.median(c[name] for c in cpus):7.0f}")
    works = [main_thread_work(t) for t in traces]
    labels = sorted({k for w in works for k in w}, key=lambda k: -statistics.median(w.get(k, 0) for w in works))
    print("the page's main thread, CPU ms by work (medians):")
    for label in labels[:16]:
        print(f"  {label:44} {statistics.median(w.get(label, 0) for w in works):7.1f}")
    print("requests of the last load (ms since navigation; encoded bytes):")
    for name, thread, start, end, size in request_times(traces[-1]):
        print(f"  {name[:40]:40} {thread:6} {start:7.0f} {end:7.0f} {size:>10,}")
    return 0


AIMS = {  # issue 21's targets, as (figure, how it compares, bound)
    "live_ratio_localhost": ("<=", 0.5),
    "live_ratio_10mbit": ("<=", 0.7),
    "brotli_mb": ("<=", 5.0),
    "update_p95_ms": ("<", 30),
    "busy_over_idle": ("<=", 1.5),
    "plan_median_ms": ("<", 50),
    "runtimes": ("<=", 1),
}


def summary(results: dict, gzip_bytes: int, latencies, numbers, session: dict, runtimes: int, paused) -> dict:
    """The figures of one run, by name (the JSON report)."""
    out = {"conditions": {}}
    for condition in CONDITIONS:
        ours, bare = results[condition, "site"], results[condition, "bare"]
        live, bare_live = statistics.median(t["live"] for t in ours), statistics.median(t["live"] for t in bare)
        alone = statistics.median(t["live"] for t in results[condition, "worker"])
        out["conditions"][condition] = {
            "first_contentful_paint_ms": statistics.median(t["fcp"] for t in ours),
            "time_to_live_ms": live,
            "time_to_sweep_drawn_ms": statistics.median(t["ready"] for t in ours),
            "bare_pyodide_start_ms": bare_live,
            "live_ratio_to_bare": live / bare_live,
            "worker_alone_ms": alone,
            "worker_alone_ratio_to_bare": alone / bare_live,
            "site_bytes": statistics.median(t["bytes"] for t in ours),
            "bare_bytes": statistics.median(t["bytes"] for t in bare),
        }
        if (condition, "baseline") in results:
            row = out["conditions"][condition]
            row["baseline_ms"] = statistics.median(t["live"] for t in results[condition, "baseline"])
            row["baseline_ratio_to_bare"] = row["baseline_ms"] / bare_live
            row["baseline_bytes"] = statistics.median(t["bytes"] for t in results[condition, "baseline"])
        if (condition, "snapshot") in results:
            row = out["conditions"][condition]
            row["snapshot_ms"] = statistics.median(t["live"] for t in results[condition, "snapshot"])
            row["snapshot_ratio_to_bare"] = row["snapshot_ms"] / bare_live
    out["site_bytes_gzip_only"] = gzip_bytes
    out["update_ms"] = {"changes": len(latencies), "median": statistics.median(latencies),
                        "p95": percentile(latencies, 0.95), "max": max(latencies),
                        "numbers_median": statistics.median(numbers), "numbers_p95": percentile(numbers, 0.95)}
    out["update_after_pause_ms"] = {"pause_s": READ_PAUSE_S, "changes": len(paused),
                                    "median": statistics.median(paused), "p95": percentile(paused, 0.95),
                                    "max": max(paused)}
    idle, busy, plans = session["idle"], session["busy"], session["plans"]
    out["planner"] = {"preset": PLANNER_PRESET, "questions": len(plans), "median_ms": statistics.median(plans),
                      "p95_ms": percentile(plans, 0.95), "max_ms": max(plans),
                      "redraw_idle_median_ms": statistics.median(idle),
                      "redraw_busy_median_ms": statistics.median(busy),
                      "redraw_busy_p95_ms": percentile(busy, 0.95), "pairs": len(idle)}
    out["runtimes"] = max(runtimes, session["runtimes"])
    return out


def table(report: dict) -> list[str]:
    """The run as one table: each figure on localhost and at 10 Mbit/s, beside its aim and whether it is met."""
    local, slow = report["conditions"]["localhost"], report["conditions"]["10 Mbit/s"]
    u, up, pl = report["update_ms"], report["update_after_pause_ms"], report["planner"]
    busy_over_idle = pl["redraw_busy_median_ms"] / pl["redraw_idle_median_ms"]
    checks = {"live_ratio_localhost": local["live_ratio_to_bare"], "live_ratio_10mbit": slow["live_ratio_to_bare"],
              "brotli_mb": local["site_bytes"] / 1e6, "update_p95_ms": u["p95"], "paused_p95_ms": up["p95"],
              "busy_over_idle": busy_over_idle,
              "plan_median_ms": pl["median_ms"], "runtimes": report["runtimes"]}  # fmt: skip

    def aim(key: str) -> str:
        how, bound = AIMS["update_p95_ms" if key == "paused_p95_ms" else key]
        met = checks[key] <= bound if how == "<=" else checks[key] < bound
        return f"{how} {bound} {'met' if met else 'NOT met'}"

    rows = [
        ("", "localhost", "10 Mbit/s + 40 ms", "aim"),
        ("calculator live (ms)", f"{local['time_to_live_ms']:.0f}", f"{slow['time_to_live_ms']:.0f}", ""),
        ("bare Pyodide start (ms)", f"{local['bare_pyodide_start_ms']:.0f}", f"{slow['bare_pyodide_start_ms']:.0f}",
         ""),
        ("live / bare", f"{local['live_ratio_to_bare']:.2f}", f"{slow['live_ratio_to_bare']:.2f}",
         f"{aim('live_ratio_localhost')} / {aim('live_ratio_10mbit')}"),
        ("the site's worker alone / bare", f"{local['worker_alone_ratio_to_bare']:.2f}",
         f"{slow['worker_alone_ratio_to_bare']:.2f}", ""),
        ("first contentful paint (ms)", f"{local['first_contentful_paint_ms']:.0f}",
         f"{slow['first_contentful_paint_ms']:.0f}", ""),
        ("bytes received, Brotli / gzip-only host (MB)",
         f"{local['site_bytes'] / 1e6:.2f} / {report['site_bytes_gzip_only'] / 1e6:.2f}",
         f"(bare page {local['bare_bytes'] / 1e6:.2f})", aim("brotli_mb") + " (Brotli)"),
        (f"input -> chart, {u['changes']} changes at once after live, median / p95 (ms)",
         f"{u['median']:.1f} / {u['p95']:.1f}", "", aim("update_p95_ms") + " (p95)"),
        ("  the numbers alone, median / p95 (ms)", f"{u['numbers_median']:.1f} / {u['numbers_p95']:.1f}", "", ""),
        (f"input -> chart, {up['changes']} changes, the first {up['pause_s']:g} s after live, median / p95 (ms)",
         f"{up['median']:.1f} / {up['p95']:.1f}", "", aim("paused_p95_ms") + " (p95)"),
        (f"{pl['preset']}: redraw idle / while planning, medians (ms)",
         f"{pl['redraw_idle_median_ms']:.1f} / {pl['redraw_busy_median_ms']:.1f}", f"ratio {busy_over_idle:.2f}",
         aim("busy_over_idle")),
        (f"{pl['preset']}: planner's answer, median / p95 (ms)", f"{pl['median_ms']:.1f} / {pl['p95_ms']:.1f}",
         f"{pl['questions']} questions", aim("plan_median_ms") + " (median)"),
        ("Pyodide runtimes a page started", str(report["runtimes"]), "", aim("runtimes")),
    ]
    if "baseline_ms" in local:  # --baseline: the other build's deck page, in the same run
        rows.insert(5, ("  --baseline's deck page: live / bare", f"{local['baseline_ratio_to_bare']:.2f}",
                        f"{slow['baseline_ratio_to_bare']:.2f}", f"{local['baseline_bytes'] / 1e6:.2f} MB"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def planner_only(site: Path, pairs: int) -> int:
    """The planner's pairs alone (planner_session): the redraw while it works over the idle one, as the ratio of
    the medians and as the median of each pair's ratio, which a machine whose load drifts sways less."""
    with bench_root(site) as root, site_browser.serve(root) as base, sync_playwright() as p:
        browser = site_browser.launch(p)
        session = planner_session(browser, base, pairs)
        browser.close()
    idle, busy, plans = session["idle"], session["busy"], session["plans"]
    each = statistics.median(b / i for b, i in zip(busy, idle, strict=True))
    print(f"{PLANNER_PRESET}, {pairs} pairs: redraw idle / while planning, medians {statistics.median(idle):.1f} / "
          f"{statistics.median(busy):.1f} ms, ratio {statistics.median(busy) / statistics.median(idle):.2f} "
          f"(median of each pair's ratio {each:.2f}); the planner's answer, median {statistics.median(plans):.1f} ms; "
          f"{session['runtimes']} runtime(s)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="cold loads of each page in each condition (default 7)")
    parser.add_argument("--changes", type=int, default=60, help="input changes timed (default 60, at least 50)")
    parser.add_argument("--pairs", type=int, default=12, help="planner pairs: a redraw idle, one while it plans")
    parser.add_argument("--quick", action="store_true", help="a short, rough run: 2 loads, 20 changes, 4 pairs")
    parser.add_argument("--site", type=Path, default=site_browser.SITE, help="the built site (default site/)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the loads' shuffled order")
    parser.add_argument("--snapshot", action="store_true", help="also measure a memory snapshot (not shipped)")
    parser.add_argument("--baseline", type=Path, help="another build of the site (say, before a change): its deck "
                        "page is loaded beside this one's, interleaved, and its live / bare reported")
    parser.add_argument("--planner-only", action="store_true", help="only the planner's pairs (--pairs of them)")
    parser.add_argument("--trace", type=int, metavar="LOADS", help="only LOADS traced loads of the deck page: "
                        "where its time goes until calc:live (CPU by thread and by work, the requests)")
    parser.add_argument("--throttled", action="store_true", help="with --trace: at 10 Mbit/s, not on localhost")
    parser.add_argument("--latency-only", action="store_true", help="only the input changes (--changes of them), "
                        "each split into its phases")
    parser.add_argument("--pause", type=float, default=0.0, help="with --latency-only: seconds the page stays idle "
                        "once live, before the two untimed changes and the timed ones (the full run times both 0 and "
                        f"{READ_PAUSE_S:g})")
    args = parser.parse_args()
    if args.latency_only:
        return latency_only(args.site, args.changes, args.pause)
    if args.trace:
        return trace_report(args.site, args.trace, "10 Mbit/s" if args.throttled else "localhost")
    if args.planner_only:
        return planner_only(args.site, args.pairs)
    if args.quick:
        args.runs, args.changes, args.pairs = 2, 20, 4
    else:
        args.changes = max(args.changes, 50)

    pages = {"site": ("", "[data-calc][data-state=ready]"), "bare": (BARE_PAGE, "body[data-state=ready]"),
             "worker": (WORKER_PAGE, "body[data-state=ready]")}
    if args.snapshot:
        pages["snapshot"] = ("__bench__/snapshot.html", "body[data-state=ready]")
    if args.baseline:
        pages["baseline"] = (f"{BASELINE_PAGE}/", "[data-calc][data-state=ready]")
    plan = [(c, p) for c in CONDITIONS for p in pages] * args.runs
    random.Random(args.seed).shuffle(plan)  # interleaved: every variant sees the same machine load
    results: dict[tuple[str, str], list[dict]] = {key: [] for key in plan}
    with bench_root(args.site, args.baseline) as root, site_browser.serve(root) as base, sync_playwright() as p:
        browser = site_browser.launch(p)
        snapshot_bytes = take_snapshot(browser, base, root) if args.snapshot else None
        for i, (condition, name) in enumerate(plan):
            path, ready = pages[name]
            results[condition, name].append(load(browser, base + path, ready, CONDITIONS[condition]))
            print(f"  load {i + 1}/{len(plan)}: {name:8} {condition:9} {results[condition, name][-1]['live']:7.0f} ms",
                  file=sys.stderr, flush=True)
        with site_browser.serve(root, encodings=("gzip",)) as gzip_base:  # the same page from a gzip-only host
            gzip_bytes = min(load(browser, gzip_base, pages["site"][1], None)["bytes"] for _ in range(2))
        latencies, numbers, runtimes, _ = update_latencies(browser, base, args.changes)
        paused = update_latencies(browser, base, args.changes, READ_PAUSE_S)[0]
        session = planner_session(browser, base, args.pairs)
        version = browser.version
        browser.close()

    report = {"chromium": version, "runs": args.runs, **summary(results, gzip_bytes, latencies, numbers, session,
                                                                runtimes, paused)}
    if snapshot_bytes:
        report["snapshot_bytes_raw"] = snapshot_bytes
    print(f"Chromium {version}, medians of {args.runs} cold loads of each page in each condition, shuffled")
    print("\n".join(table(report)))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
