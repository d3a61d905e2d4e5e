"""The planner on the built site and the "Beyond one device" page, in Debian's Chromium: the
page's layouts against `python -m calc --plan --json`, loading a layout, the parallel inputs in
the address, a bad global batch, and every number of the Beyond page against calc."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import ARTIFACTS, AWAIT_DRAWN, LIVE_TIMEOUT_MS, answer_for, built_site, settled_url

import calc
from calc.activations import kept_bytes
from calc.recipes import state_bytes
from conftest import cli_json

PLAN_ROW_JS = """() => [...document.querySelectorAll('[data-plan-row]')].map(tr => ({
  devices: Number(tr.dataset.devices), dp: Number(tr.dataset.dp), tp: Number(tr.dataset.tp),
  pp: Number(tr.dataset.pp), zero: Number(tr.dataset.zero), recompute: tr.dataset.recompute,
  micro_batch: Number(tr.dataset.microBatch), grad_accum: Number(tr.dataset.gradAccum), peak: Number(tr.dataset.peak),
  extra_compute: Number(tr.dataset.extraCompute)}))"""
# The browser, the local server and a page that records every request (none may leave the origin),
# shared with the calculator's tests.
base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change, assert_page_shows = calculator_tests.change, calculator_tests.assert_page_shows
ROW_KEYS = ("devices", "dp", "tp", "pp", "zero", "recompute", "micro_batch", "grad_accum", "peak", "extra_compute")


def cli_plan(*flags: str) -> list[dict]:
    """What `python -m calc --plan --json FLAGS` prints, cut to the columns the page shows."""
    return [{k: row[k] for k in ROW_KEYS} for row in cli_json(["--plan", *flags])]


WATCH_DRAWN = """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
    .addEventListener('calc:drawn', e => resolve(e.detail.source), {once: true})); }"""


def wait_for_live_plan(page) -> None:
    page.wait_for_selector("[data-planner][data-plan-state=ready][data-plan-source=live]", timeout=LIVE_TIMEOUT_MS)


def test_without_javascript_the_planner_shows_calcs_layouts(open_page):
    """The build-time planner holds the CLI's answer for the defaults, and reads with JavaScript off."""
    page, _ = open_page(wait_live=False, java_script_enabled=False)
    want = cli_plan()
    assert page.evaluate(PLAN_ROW_JS) == want
    first = page.locator("[data-plan-row]").first.text_content()
    assert f"{calc.format_gb(want[0]['peak'])} GB" in first and f"{want[0]['extra_compute']:.1%}" in first
    assert page.input_value('[name="global-batch"]') == "1024"


@pytest.mark.parametrize(
    ("preset", "seq", "batch", "capacity"),
    [("llama-2-70b", "4096", "1024", "80"), ("llama-2-13b", "2048", "256", "40")],
)
def test_a_planner_query_on_the_page_matches_the_cli(open_page, preset, seq, batch, capacity):
    """Preset, sequence, global batch and capacity set on the page give the CLI's layouts, row by row."""
    page, recorder = open_page()
    change(page, "preset", preset)
    change(page, "seq", seq)
    change(page, "global-batch", batch)
    change(page, "capacity-gb", capacity)
    wait_for_live_plan(page)
    want = cli_plan("--preset", preset, "--seq", seq, "--global-batch", batch, "--capacity-gb", capacity)
    assert want, "the CLI found no layout: choose inputs where some fit"
    assert page.evaluate(PLAN_ROW_JS) == want
    caption = page.text_content("[data-plan-caption]")
    assert f"global batch {int(batch):,}" in caption and f"on {capacity} GB devices" in caption
    assert f"{len(want)} layout" in page.text_content("[data-plan-status]")
    query = parse_qs(urlparse(settled_url(page)).query)
    assert query["global-batch"] == [batch] if batch != "1024" else "global-batch" not in query
    assert recorder.errors == []


def test_loading_a_layout_sets_the_inputs_and_its_peak(open_page):
    """A row's Load button fills dp, tp, pp, ZeRO, recomputation, micro-batch and micro-batches per step;
    the calculator's peak is then the row's peak per device, and the row is marked as loaded."""
    page, recorder = open_page()
    change(page, "preset", "llama-2-70b")
    wait_for_live_plan(page)
    row = page.locator("[data-plan-row]").nth(2)
    names = ("dp", "tp", "pp", "zero", "recompute", "micro-batch", "grad-accum")
    layout = {k: row.get_attribute(f"data-{k}") for k in names}
    peak = row.get_attribute("data-peak")
    page.evaluate(
        """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
             .addEventListener('calc:drawn', e => resolve(e.detail.source), {once: true})); }"""
    )
    row.locator("[data-plan-use]").click()
    assert page.evaluate(AWAIT_DRAWN) == "live"
    for name, value in layout.items():
        assert page.input_value(f'[data-calc-form] [name="{name}"]') == value
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == peak
    assert_page_shows(page, answer_for({"preset": "llama-2-70b", **layout}))
    assert "calc-row--selected" in (row.get_attribute("class") or "")
    # Loading a layout does not change the planner's question: the table stays as it was.
    assert page.get_attribute("[data-planner]", "data-plan-state") == "ready"
    assert recorder.errors == []


def test_loading_a_layout_sets_the_pipeline_schedule_it_assumed(open_page):
    """The planner's pipelines are 1F1B's (the deck's accounting): Load sets the Pipeline schedule to it, so a
    GPipe the reader chose before (which the deck walk refuses, naming the eager walk) does not stay behind a
    layout it was not planned for, and the page answers the row's peak."""
    page, recorder = open_page()
    change(page, "preset", "llama-2-70b")
    wait_for_live_plan(page)
    page.locator('[data-calc-form] [name="pp-schedule"]').select_option("gpipe")  # refused: no redraw
    page.wait_for_selector('[data-calc-form] [aria-invalid="true"]')
    row = page.locator("[data-plan-row]").nth(1)
    assert row.get_attribute("data-pp-schedule") == "1f1b"
    assert row.locator("[data-plan-use]").is_enabled()  # the reader's schedule is not the planner's question
    page.evaluate(
        """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
             .addEventListener('calc:drawn', e => resolve(e.detail.source), {once: true})); }"""
    )
    row.locator("[data-plan-use]").click()
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert page.input_value('[data-calc-form] [name="pp-schedule"]') == "1f1b"
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == row.get_attribute("data-peak")
    assert page.locator('[data-calc-form] [aria-invalid="true"]').count() == 0
    assert "calc-row--selected" in (row.get_attribute("class") or "")
    assert recorder.errors == []


def test_the_load_buttons_are_one_tab_stop_and_the_arrows_move_between_them(open_page):
    """Tab reaches the planner's first Load button and then leaves the table; the arrow keys, Home and End move
    between its buttons (a roving tabindex), so fifty layouts are not fifty Tab stops."""
    page, recorder = open_page()
    change(page, "preset", "llama-2-70b")
    wait_for_live_plan(page)
    buttons = page.locator("[data-plan-use]")
    count = buttons.count()
    assert count > 3
    tabbable = "() => [...document.querySelectorAll('[data-plan-use]')].filter(b => b.tabIndex === 0).length"
    assert page.evaluate(tabbable) == 1
    focused_row = "() => [...document.querySelectorAll('[data-plan-use]')].indexOf(document.activeElement)"
    buttons.first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    assert page.evaluate(focused_row) == 2
    page.keyboard.press("ArrowUp")
    assert page.evaluate(focused_row) == 1
    page.keyboard.press("End")
    assert page.evaluate(focused_row) == count - 1
    page.keyboard.press("Home")
    assert page.evaluate(focused_row) == 0
    page.keyboard.press("Tab")  # out of the table, not to the next Load button
    assert page.evaluate(focused_row) == -1
    assert recorder.errors == []


@pytest.mark.parametrize("width", [390, 768, 1280])
def test_the_planners_header_stays_in_view_as_its_box_scrolls(open_page, width):
    """Scrolled down, the planner's box still shows its column headers at its top; from 768 px on it has no
    sideways scroll."""
    page, _ = open_page(wait_live=False, viewport={"width": width, "height": 900})
    box = page.evaluate(
        """() => { const box = document.querySelector('[data-planner] .calc-plan-scroll');
             box.scrollTop = 200;
             const th = box.querySelector('thead th').getBoundingClientRect();
             return {scrolled: box.scrollTop, gap: th.top - box.getBoundingClientRect().top,
                     sideways: box.scrollWidth - box.clientWidth}; }"""
    )
    assert box["scrolled"] == 200 and 0 <= box["gap"] <= 2
    if width >= 768:
        assert box["sideways"] == 0


@pytest.mark.parametrize("width", [390, 768])
def test_the_tables_captions_stay_in_their_boxes(open_page, width):
    """The planner's and the fit list's captions wrap inside their boxes and stay in view as the tables
    scroll sideways (at 390 px they are wider than the page)."""
    page, _ = open_page(wait_live=False, viewport={"width": width, "height": 900})
    for box_selector in ("[data-planner] .calc-plan-scroll", "[data-fit] .calc-plan-scroll"):
        spans = page.evaluate(
            """(selector) => { const box = document.querySelector(selector);
                 const caption = box.querySelector('caption');
                 const inside = () => { const b = box.getBoundingClientRect(), c = caption.getBoundingClientRect();
                   return [c.left - b.left, b.right - c.right]; };
                 const before = inside();
                 box.scrollLeft = box.scrollWidth;
                 return {before, after: inside(), sideways: box.scrollLeft}; }""",
            box_selector,
        )
        for left, right in (spans["before"], spans["after"]):
            assert left >= -1 and right >= -1, (box_selector, spans)
        if width == 390:
            assert spans["sideways"] > 0, "the table fits the phone: nothing was scrolled"


def test_at_390_px_the_tables_headers_are_one_line_with_no_band_under_the_caption(open_page):
    """A phone: the tables scroll sideways, and their headers keep to one line (wrapped, "Micro-batches per step"
    made the header row four lines tall, an empty band between the caption and the short headers)."""
    page, _ = open_page(wait_live=False, viewport={"width": 390, "height": 900})
    for box_selector in ("[data-planner] .calc-plan-scroll", "[data-fit] .calc-plan-scroll"):
        rows = page.evaluate(
            """(selector) => { const box = document.querySelector(selector);
                 const height = (e) => e.getBoundingClientRect().height;
                 return {head: height(box.querySelector('thead tr')), row: height(box.querySelector('tbody tr')),
                         gap: box.querySelector('thead').getBoundingClientRect().top -
                              box.querySelector('caption').getBoundingClientRect().bottom,
                         sideways: box.scrollWidth - box.clientWidth}; }""",
            box_selector,
        )
        assert rows["head"] <= 1.2 * rows["row"] and abs(rows["gap"]) <= 1, (box_selector, rows)
        assert rows["sideways"] > 0, "the table fits the phone: it need not scroll"


# The message row's words against the viewport and its box, before and after the box scrolls sideways.
NONE_EDGES = """() => { const box = document.querySelector('[data-fit] .calc-plan-scroll');
    const words = document.createRange();
    words.selectNodeContents(box.querySelector('[data-fit-none] td'));
    const edges = () => { const w = words.getBoundingClientRect(), b = box.getBoundingClientRect();
      return {left: w.left - b.left, right: b.right - w.right,
              viewport: document.documentElement.clientWidth - w.right}; };
    const before = edges();
    box.scrollLeft = box.scrollWidth;
    return {before, after: edges(), sideways: box.scrollLeft}; }"""


@pytest.mark.parametrize("width", [390, 1280])
def test_a_tables_one_message_wraps_within_its_box(open_page, width):
    """`?preset=llama-3.1-8b&seq=2048&walk=eager` (issue 20's last pass, minor 6): the fit list's one cell, "Not
    computed: walk: ...", wraps within the box and the viewport, and stays in view as the box scrolls sideways;
    at 390 px the table still scrolls sideways."""
    page, recorder = open_page("?preset=llama-3.1-8b&seq=2048&walk=eager", viewport={"width": width, "height": 900})
    page.wait_for_selector("[data-fit] [data-fit-none]:has-text('Not computed: walk')", timeout=LIVE_TIMEOUT_MS)
    edges = page.evaluate(NONE_EDGES)
    for side in (edges["before"], edges["after"]):
        assert min(side.values()) >= -1, edges
    assert (edges["sideways"] > 0) == (width == 390), edges
    assert recorder.errors == []


# A worker that never gets ready: the page stays on its build-time rows.
SILENT_WORKER = "onmessage = () => {};"


def test_the_planners_status_says_what_its_rows_are_before_and_after_live(open_page):
    """The build-time status counts its rows as the live planner does (a full list is "the first N"); an edit made
    before the page is live says the rows wait for the live planner, and undoing it says what they are again.
    Live, an input refused then mended back to the rows' own question says their status, not the refusal."""
    route = ("**/calc-worker.mjs*", lambda r: r.fulfill(status=200, content_type="text/javascript", body=SILENT_WORKER))
    page, _ = open_page(wait_live=False, route=route)
    limit = page.evaluate("() => JSON.parse(document.querySelector('[data-calc-config]').textContent).planLimit")
    assert len(cli_plan()) == limit  # the default question fills the list
    built = f"The first {limit} layouts that fit (computed when this site was built)."
    status = page.locator("[data-plan-status]")
    assert status.text_content() == built
    page.fill('[data-calc-form] [name="global-batch"]', "512")
    page.wait_for_selector("[data-planner][data-plan-state=pending]")
    assert "planning for yours once the live calculator starts" in status.text_content()
    page.fill('[data-calc-form] [name="global-batch"]', "1024")
    page.wait_for_selector("[data-planner][data-plan-state=ready]")
    assert status.text_content() == built

    live, recorder = open_page()
    assert live.text_content("[data-plan-status]") == built
    live.fill('[data-calc-form] [name="global-batch"]', "0")
    live.wait_for_selector("[data-planner][data-plan-state=error]")
    change(live, "global-batch", "1024")
    live.wait_for_selector("[data-planner][data-plan-state=ready]")
    assert live.text_content("[data-plan-status]") == built
    assert recorder.errors == []


def test_when_nothing_fits_each_table_says_so_across_its_columns(open_page):
    """A 1 GB device: the live planner and fit list have no row to load, and each says why in one cell as wide as
    its table, starting at its left edge."""
    page, recorder = open_page("?capacity-gb=1")
    wait_for_live_plan(page)
    page.wait_for_selector("[data-fit] [data-fit-status]:not(:has-text('computed when this site was built'))")
    rows = page.evaluate(
        """() => [['plan', '[data-planner]'], ['fit', '[data-fit]']].map(([kind, at]) => {
             const table = document.querySelector(`${at} table`);
             const cells = [...table.tBodies[0].rows].map(
               r => [r.dataset[`${kind}None`] !== undefined, r.cells[0].colSpan, r.cells[0].textContent,
                     getComputedStyle(r.cells[0]).textAlign]);
             return [table.tHead.rows[0].cells.length, cells, table.querySelectorAll('button').length];
           })"""
    )
    assert rows == [
        [12, [[True, 12, "No layout up to 4,096 devices fits.", "left"]], 0],
        [9, [[True, 9, "Nothing fits one card.", "left"]], 0],
    ]
    # said once (a fresh reviewer's minor): the status says where it was computed, not "0 layouts fit" again
    assert re.fullmatch(r"Computed in your browser in [0-9,]+ ms\.", page.text_content("[data-plan-status]"))
    assert page.text_content("[data-fit-status]") == "Computed in your browser."
    assert recorder.errors == []


def test_parallel_inputs_round_trip_through_the_address(open_page):
    """dp, ZeRO, tp and the global batch go into the URL, and opening that URL restores them."""
    page, _ = open_page()
    change(page, "dp", "8")
    change(page, "zero", "3")
    change(page, "tp", "2")
    change(page, "global-batch", "512")
    query = parse_qs(urlparse(settled_url(page)).query)
    assert {k: query[k] for k in ("dp", "zero", "tp", "global-batch")} == {
        "dp": ["8"], "zero": ["3"], "tp": ["2"], "global-batch": ["512"]
    }
    again, recorder = open_page(settled_url(page).split("/", 3)[3])
    for name, value in (("dp", "8"), ("zero", "3"), ("tp", "2"), ("global-batch", "512")):
        assert again.input_value(f'[data-calc-form] [name="{name}"]') == value
    assert_page_shows(again, answer_for({"dp": "8", "zero": "3", "tp": "2", "global-batch": "512"}))
    wait_for_live_plan(again)
    assert again.evaluate(PLAN_ROW_JS) == cli_plan("--global-batch", "512")
    assert again.locator("[data-calc-notice]").is_hidden()
    assert recorder.errors == []


@pytest.mark.parametrize("value", ["0", "lots", "2000000"])
def test_a_bad_global_batch_names_the_field(open_page, value):
    """A global batch calc rejects is named beside its field; the planner waits; mending it plans again."""
    page, recorder = open_page()
    page.fill('[data-calc-form] [name="global-batch"]', value)
    error = page.locator('[data-error-for="global-batch"]')
    error.wait_for(state="visible")
    assert error.text_content().startswith("Global batch")
    assert page.get_attribute('[data-calc-form] [name="global-batch"]', "aria-invalid") == "true"
    assert page.get_attribute("[data-planner]", "data-plan-state") == "error"
    change(page, "global-batch", "256")
    assert error.is_hidden()
    wait_for_live_plan(page)
    assert page.evaluate(PLAN_ROW_JS) == cli_plan("--global-batch", "256")
    assert recorder.errors == []


def test_sequence_parallel_at_one_rank_is_refused_by_the_step_and_read_by_the_planner(open_page):
    """The switch at one tensor-parallel rank splits nothing in the step, which names it beside the switch (as
    the CLI does); the planner still plans, its layouts with tp 2 or more running it, as --plan does."""
    page, recorder = open_page()
    page.check('[data-calc-form] [name="sequence-parallel"]')
    error = page.locator('[data-error-for="sequence-parallel"]')
    error.wait_for(state="visible")
    assert "tensor-parallel ranks" in error.text_content()
    want = cli_plan("--sequence-parallel")
    assert want != cli_plan()  # the switch changes the layouts' peaks
    first = {k: want[0][k] for k in ("devices", "dp", "tp", "micro_batch", "peak")}  # its first row's own peak
    page.wait_for_function("want => Object.entries(want).every(([k, v]) => document.querySelector("
                           "'[data-plan-row]')?.dataset[k.replace('_b', 'B')] === String(v))", arg=first,
                           timeout=LIVE_TIMEOUT_MS)  # fmt: skip
    wait_for_live_plan(page)
    assert page.evaluate(PLAN_ROW_JS) == want
    assert recorder.errors == []


def gb(n: int) -> str:
    return f"{calc.format_gb(n)} GB"


def test_the_beyond_page_shows_calcs_numbers(open_page):
    """ZeRO's Figure 1, the per-layer activations under each split, the peaks and the planner's
    layouts on the Beyond page are calc's, computed here directly."""
    page, recorder = open_page("beyond/", wait_live=False, java_script_enabled=False)
    text = " ".join(page.text_content("article").split())
    assert "{{" not in text
    zero_cells = page.eval_on_selector_all(
        "article table:first-of-type tbody tr", "trs => trs.map(tr => tr.lastElementChild.textContent.trim())"
    )
    figure1 = [gb(sum(state_bytes(7_500_000_000, "mixed", calc.Parallel(dp=64, zero=z)).values())) for z in range(4)]
    assert zero_cells == figure1 == ["120.0 GB", "31.4 GB", "16.6 GB", "1.9 GB"]  # Rajbhandari et al., Figure 1

    llama, seq = calc.PRESETS["llama-7b"], 4096
    for par, recompute in [
        (calc.Parallel(), "none"),
        (calc.Parallel(tp=8), "none"),
        (calc.Parallel(tp=8, sequence_parallel=True), "none"),
        (calc.Parallel(flash=True), "none"),
    ]:
        assert f"{kept_bytes(llama, seq, 1, recompute, par):,} bytes" in text
    for par, recompute in [
        (calc.Parallel(dp=8, zero=1), "none"),
        (calc.Parallel(dp=8, zero=3), "none"),
        (calc.Parallel(dp=8, zero=3), "selective"),
        (calc.Parallel(tp=8), "none"),
        (calc.Parallel(tp=8, sequence_parallel=True), "selective"),
        (calc.Parallel(pp=4), "none"),
        (calc.Parallel(tp=4, pp=2, sequence_parallel=True), "selective"),
        (calc.Parallel(dp=8, zero=3, flash=True), "none"),
    ]:
        assert gb(calc.step(llama, seq, 1, "mixed", recompute, par=par)["peak"]) in text, (par, recompute)
    seventy = calc.PRESETS["llama-2-70b"]
    assert f"{kept_bytes(seventy, seq, 1, 'none'):,} bytes" in text
    assert f"{kept_bytes(seventy.replace(kv_heads=64), seq, 1, 'none'):,} with a key" in text

    plan_tables = page.eval_on_selector_all(
        "article table",
        """ts => ts.filter(t => t.tHead.textContent.includes('Extra compute')).map(t =>
             [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent.trim())))""",
    )
    for rows, name in zip(plan_tables, ("llama-7b", "llama-2-70b"), strict=True):
        want = [
            [str(r["devices"]), str(r["dp"]), str(r["tp"]), str(r["pp"]), str(r["zero"]), r["recompute"],
             str(r["micro_batch"]), f"{r['grad_accum']:,}", gb(r["peak"]), f"{r['extra_compute']:.1%}"]
            for r in calc.plan(calc.PRESETS[name], seq, 1024, 80 * calc.GB, limit=3)
        ]
        assert rows == want
    assert recorder.errors == []


def test_the_beyond_page_has_no_serious_accessibility_violations(open_page):
    """axe-core on the Beyond page (formulas and tables), light scheme."""
    from axe_playwright_python.sync_playwright import Axe

    page, _ = open_page("beyond/", wait_live=False)
    page.wait_for_timeout(300)
    violations = Axe().run(page).response["violations"]
    assert [(v["id"], v["impact"]) for v in violations if v["impact"] in ("serious", "critical")] == []


def test_screenshot_of_the_planner_for_review(open_page):
    """Saves test-artifacts/planner-light.png and planner-dark.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    for scheme in ("light", "dark"):
        page, _ = open_page(color_scheme=scheme)
        change(page, "preset", "llama-2-70b")
        wait_for_live_plan(page)
        page.locator("[data-plan-row]").nth(1).locator("[data-plan-use]").click()
        page.wait_for_function("() => document.querySelector('[data-plan-row].calc-row--selected')")
        page.add_style_tag(content=".md-header { position: absolute; }")
        page.locator("[data-planner]").screenshot(path=str(ARTIFACTS / f"planner-{scheme}.png"))
        assert (ARTIFACTS / f"planner-{scheme}.png").stat().st_size > 10_000


def test_the_built_beyond_page_is_in_the_navigation():
    """The Beyond page sits between the deck's page and Results."""
    html = (built_site() / "index.html").read_text()
    nav = [html.find(f'href="{href}"') for href in ("beyond/", "results/")]
    assert all(i >= 0 for i in nav) and nav[0] < nav[1]


def test_a_row_loads_its_own_sequence_parallelism_and_a_fit_row_none(open_page):
    """Sequence parallelism is part of the planner's question, and its rows of tp 1 do without it (calc.plan): Load
    unticks it there, so the page answers the row's own command (the CLI's for the row) instead of refusing the
    box left ticked beside tp 1 and keeping the figure before (a fresh adversarial pass's two majors). A fit row
    is one card: its Load unticks it too, as the CLI's --fit-card refuses --sequence-parallel."""
    page, recorder = open_page("?tp=2&sequence-parallel=true")
    wait_for_live_plan(page)
    row = page.locator('[data-plan-row][data-tp="1"]').first
    assert row.get_attribute("data-sequence-parallel") == "false"
    names = ("dp", "tp", "pp", "zero", "recompute", "micro-batch", "grad-accum")
    layout = {k: row.get_attribute(f"data-{k}") for k in names}
    page.evaluate(WATCH_DRAWN)
    row.locator("[data-plan-use]").click()
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert not page.is_checked('[data-calc-form] [name="sequence-parallel"]')
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == row.get_attribute("data-peak")
    assert "--sequence-parallel" not in page.text_content('[data-out="cli"]')
    assert page.locator('[data-calc-form] [aria-invalid="true"]').count() == 0
    want = cli_json(["--tp", layout["tp"], "--dp", layout["dp"], "--pp", layout["pp"], "--zero", layout["zero"],
                     "--recompute", layout["recompute"], "--micro-batch", layout["micro-batch"], "--grad-accum",
                     layout["grad-accum"], "--json"])  # fmt: skip
    assert want["peak"] == int(row.get_attribute("data-peak"))
    page, recorder = open_page("?tp=2&sequence-parallel=true")
    page.wait_for_function("() => document.querySelector('[data-fit-status]').textContent.includes('in your browser')",
                           timeout=LIVE_TIMEOUT_MS)  # fmt: skip
    fit = page.locator("tr[data-fit-row]").first
    page.evaluate(WATCH_DRAWN)
    fit.locator("[data-fit-use]").click()
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert not page.is_checked('[data-calc-form] [name="sequence-parallel"]')
    assert page.input_value('[data-calc-form] [name="tp"]') == "1"
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == fit.get_attribute("data-peak")
    assert page.locator('[data-calc-form] [aria-invalid="true"]').count() == 0 and recorder.errors == []
