"""The built site in Debian's Chromium: build-time and live numbers, inputs, errors, links,
offline loading, accessibility and the animation's keyboard controls."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from site_fixtures import (
    ARTIFACTS,
    AWAIT_DRAWN,
    LIVE_TIMEOUT_MS,
    PARTS,
    Recorder,
    answer_for,
    built_site,
    expected_table,
    rendered_table,
    rendered_text,
    require_chromium,
    settled_url,
)

import calc
from conftest import ROOT
from hooks import deck
from scripts import site_browser

playwright_api = pytest.importorskip("playwright.sync_api")

DEFAULT = answer_for({})
RESULTS_ROW = re.compile(r"^\| (?P<label>[^|]+?) \| (?P<cells>(?:[^|]+\|){7})", re.MULTILINE)


@pytest.fixture(scope="module")
def base_url():
    with site_browser.serve(built_site()) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    with playwright_api.sync_playwright() as p:
        browser = site_browser.launch(p)
        yield browser
        browser.close()


@pytest.fixture
def open_page(browser, base_url):
    """open_page(query="", **context options) -> (page, recorder); no request may leave the origin, and a page
    starts one Pyodide runtime (issue 21: the planner and the fit list share the calculator's), `runtimes` where
    a test restarts it."""
    contexts, recorders = [], []

    def opener(query: str = "", wait_live: bool = True, route=None, runtimes: int = 1, **options):
        context = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **options})
        contexts.append(context)
        if route:
            context.route(*route)
        page = context.new_page()
        recorder = Recorder(base_url)
        recorder.attach(page)
        recorder.allowed_runtimes = runtimes
        recorders.append(recorder)
        page.goto(base_url + query)
        if wait_live:
            page.wait_for_selector("[data-calc][data-state=ready]", timeout=LIVE_TIMEOUT_MS)
        return page, recorder

    yield opener
    for recorder in recorders:
        assert recorder.foreign() == [], "requests left the local origin"
        assert recorder.runtimes() <= recorder.allowed_runtimes, f"{recorder.runtimes()} Pyodide runtimes on one page"
    for context in contexts:
        context.close()


def change(page, name: str, value) -> None:
    """Set one input as a reader would and wait for the live redraw."""
    page.evaluate(
        """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
             .addEventListener('calc:drawn', e => resolve(e.detail.source), {once: true})); }"""
    )
    field = page.locator(f'[data-calc-form] [name="{name}"]')
    kind = field.evaluate("e => e.type")
    if kind.startswith("select"):
        field.select_option(value)
    elif kind == "checkbox":
        field.set_checked(value)
    else:
        field.fill(value)
    assert page.evaluate(AWAIT_DRAWN) == "live"


def results_md_cells() -> dict[str, list[str]]:
    """{recipe id: [the seven GB texts of docs/results.md's §10.1 table]}."""
    ids = {row["label"]: row["id"] for row in DEFAULT["table"]}
    text = (ROOT / "docs" / "results.md").read_text()
    out = {}
    for m in RESULTS_ROW.finditer(text):
        if m["label"] in ids:
            out[ids[m["label"]]] = [c.strip().strip("*") for c in m["cells"].split("|")[:7]]
    assert set(out) == {row["id"] for row in DEFAULT["table"]}, "results.md's recipe table not found"
    return out


def assert_page_shows(page, answer: dict) -> None:
    """Table, bar chart, sweep chart, animation and summary all hold `answer`'s values."""
    want = expected_table(answer)
    assert rendered_table(page) == want
    texts = rendered_text(page)
    for row in answer["table"]:
        assert texts[row["id"]] == {p: row["display"][p]["text"] for p in PARTS}
    bars = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('[data-chart=breakdown] g[data-recipe]')].map(g => [
             g.dataset.recipe,
             {...Object.fromEntries([...g.querySelectorAll('rect')]
                .map(r => [r.dataset.part, Number(r.dataset.bytes)])),
              peak: Number(g.dataset.peak)}]))"""
    )
    assert bars == want
    lines = page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('[data-chart=sweep] polyline[data-recipe]')]
             .map(l => [l.dataset.recipe, [Number(l.dataset.first), Number(l.dataset.last),
                                           l.getAttribute('points').split(' ').length]]))"""
    )
    sweep = answer["sweep"]
    assert lines == {rid: [p[0], p[-1], len(sweep["seq"])] for rid, p in sweep["peaks"].items()}
    walk = page.eval_on_selector("[data-chart=walk] svg", "s => ({...s.dataset})")
    step = answer["step"]
    assert walk.pop("drawnEvents") == str(len(step["events"])) and walk.pop("peakY").isdigit()  # one bar an event
    assert walk == {"events": str(len(step["events"])), "peakIndex": str(step["peak_index"]), "peak": str(step["peak"])}
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == str(step["peak"])
    assert page.text_content('[data-out="peak-gib"]') == f"{calc.units.format_gib(step['peak'])} GiB"
    assert page.text_content('[data-out="peak-event"]') == step["peak_event"]
    capacities = page.eval_on_selector_all(".calc-capacity", "gs => gs.map(g => g.dataset.capacity)")
    assert capacities == [str(answer["capacity"])] * 3  # the same device line on all three charts


def test_without_javascript_the_build_time_numbers_match_results_and_calc(open_page):
    """With JavaScript off the table already holds calc's bytes and results.md's figures."""
    page, _ = open_page(wait_live=False, java_script_enabled=False)
    assert rendered_table(page) == expected_table(DEFAULT)
    texts = rendered_text(page)
    for rid, cells in results_md_cells().items():
        assert [texts[rid][p] for p in PARTS] == cells
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == str(DEFAULT["step"]["peak"])
    assert page.locator("noscript").count() >= 3  # the static figures stand in for the charts


def test_while_pyodide_loads_the_build_time_numbers_and_charts_show(open_page):
    """Before the worker is ready the page is drawn from the build-time answer, with a quiet status."""
    page, recorder = open_page(wait_live=False, route=("**/*.whl", lambda route: None))  # never answered
    page.wait_for_selector("[data-chart=walk] svg")
    assert page.get_attribute("[data-calc]", "data-state") == "loading"
    assert "Starting the live calculator" in page.text_content("[data-calc-status]")
    assert_page_shows(page, DEFAULT)
    assert recorder.errors == []


def test_live_numbers_match_results_and_calc(open_page):
    """Once live, every cell and peak equals the CPython calculator and results.md."""
    page, recorder = open_page()
    assert page.get_attribute("[data-calc]", "data-source") == "live"
    assert_page_shows(page, DEFAULT)
    texts = rendered_text(page)
    for rid, cells in results_md_cells().items():
        assert [texts[rid][p] for p in PARTS] == cells
    assert "Live" in page.text_content("[data-calc-status]")
    assert recorder.errors == []


@pytest.mark.parametrize(
    ("name", "value", "inputs"),
    [
        ("seq", "8192", {"seq": "8192"}),
        ("micro-batch", "4", {"micro-batch": "4"}),
        ("recipe", "fp32", {"recipe": "fp32"}),
        ("recompute", "selective", {"recompute": "selective"}),
        ("preset", "llama-2-13b", {"preset": "llama-2-13b"}),
        ("kv-heads", "8", {"kv-heads": "8"}),
        ("dp", "8", {"dp": "8"}),
        ("zero", "3", {"dp": "2", "zero": "3"}),  # over 2 workers: over one it is refused (ZeRO shards nothing)
        ("capacity-gb", "94.5", {"capacity-gb": "94.5"}),
    ],
)
def test_changing_an_input_redraws_everything_with_calcs_values(open_page, name, value, inputs):
    """Table, charts and animation follow the CPython calculator for the same inputs; the URL keeps them. The
    page opens with the inputs' other fields (a link's), then the reader changes this one."""
    start = "&".join(f"{k}={v}" for k, v in inputs.items() if k != name)
    page, recorder = open_page(f"?{start}" if start else "")
    change(page, name, value)
    assert_page_shows(page, answer_for(inputs))
    query = parse_qs(urlparse(settled_url(page)).query)
    assert query[name] == [value]
    assert recorder.errors == []


def test_the_charts_take_their_new_width_when_it_changes_during_a_redraw(open_page):
    """The calculator narrows between the numbers and their sweep: once drawn, every chart is as wide as its box
    (the sweep too, which was being computed when the width changed: a fine-tuning sweep of a 70B model takes
    the worker several frames, so the page lays out the new width before it comes)."""
    page, recorder = open_page("?preset=llama-2-70b&finetune=lora")
    charts = page.evaluate(
        """() => new Promise(resolve => {
             const root = document.querySelector('[data-calc]');
             const before = root.querySelector('[data-chart]').clientWidth;
             root.addEventListener('calc:numbers', () => { root.style.maxWidth = `${before - 200}px`; }, {once: true});
             const frames = (n, done) => n ? requestAnimationFrame(() => frames(n - 1, done)) : done();
             root.addEventListener('calc:drawn', () => frames(4, () => resolve({before, charts:
               [...root.querySelectorAll('[data-chart]')].map(c => [c.dataset.chart, c.clientWidth,
                 Number(c.querySelector('svg').getAttribute('width'))])})), {once: true});
             const field = root.querySelector('[data-calc-form] [name="seq"]');
             field.value = '3000';
             field.dispatchEvent(new Event('input', {bubbles: true}));
           })"""
    )
    assert len(charts["charts"]) == 3
    for name, width, drawn in charts["charts"]:
        assert width < charts["before"] and drawn == max(280, width), (name, width, drawn)
    assert recorder.errors == []


def test_a_link_reproduces_a_configuration(open_page):
    """Opening the address of a configured page shows the same configuration."""
    page, _ = open_page()
    change(page, "preset", "gpt2")
    change(page, "micro-batch", "8")
    change(page, "recompute", "full")
    page.evaluate(
        """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
             .addEventListener('calc:drawn', resolve, {once: true})); }"""
    )
    page.locator('[data-capacity-preset="141"]').click()
    page.evaluate(AWAIT_DRAWN)
    link = settled_url(page).split("/", 3)[3]
    again, recorder = open_page(link)
    assert again.input_value('[name="preset"]') == "gpt2"
    assert again.input_value('[name="capacity-gb"]') == "141"
    inputs = {"preset": "gpt2", "micro-batch": "8", "recompute": "full", "capacity-gb": "141"}
    assert_page_shows(again, answer_for(inputs))
    assert again.locator("[data-calc-notice]").is_hidden()
    assert recorder.errors == []


def test_a_preset_only_link_takes_the_presets_own_sequence(open_page):
    """?preset=gpt2 alone shows GPT-2 at its own default sequence (its context), not the default 4,096."""
    page, recorder = open_page("?preset=gpt2")
    page.wait_for_function("() => document.querySelector('[data-calc]').dataset.source === 'live'")
    assert page.input_value('[name="seq"]') == "1024"
    assert_page_shows(page, answer_for({"preset": "gpt2"}))
    assert page.locator("[data-calc-notice]").is_hidden()
    assert recorder.errors == []


@pytest.mark.parametrize("query", ["?seq=banana", "?preset=gpt-5", "?capacity-gb=-3", "?heads=5"])
def test_a_malformed_link_loads_the_defaults_with_a_notice(open_page, query):
    """A link value calc cannot use falls back to its default and the page says so."""
    page, recorder = open_page(query)
    page.wait_for_selector("[data-calc-notice]:not([hidden])")
    assert "defaults" in page.text_content("[data-calc-notice]")
    assert page.input_value('[name="seq"]') == "4096"
    assert page.input_value('[name="capacity-gb"]') == "80"
    page.wait_for_function("() => document.querySelector('[data-calc]').dataset.source === 'live'")
    assert_page_shows(page, DEFAULT)
    assert recorder.errors == []


@pytest.mark.parametrize(
    ("name", "value", "label"),
    [
        ("seq", "abc", "Sequence"),
        ("micro-batch", "0", "Micro-batch"),
        ("heads", "7", "Heads"),
        ("capacity-gb", "lots", "Capacity"),
    ],
)
def test_bad_input_names_the_field_and_the_page_keeps_working(open_page, name, value, label):
    """The message sits beside the field and names it; other controls still redraw."""
    page, recorder = open_page()
    page.fill(f'[data-calc-form] [name="{name}"]', value)
    error = page.locator(f'[data-error-for="{name}"]')
    error.wait_for(state="visible")
    assert error.text_content().startswith(label)
    assert page.get_attribute(f'[data-calc-form] [name="{name}"]', "aria-invalid") == "true"
    assert_page_shows(page, DEFAULT)  # the last good answer stays, marked as the last one accepted
    assert page.get_attribute("[data-calc]", "data-stale") == "true"
    assert error.text_content().endswith("; the numbers shown are the last accepted")
    page.click('[data-anim="forward"]')  # the animation still steps
    assert "Event" in page.text_content('[data-anim="label"]')
    # Mending the field brings the live answer back and clears the message.
    good = {"seq": "2048", "micro-batch": "2", "heads": "16", "capacity-gb": "40"}[name]
    change(page, name, good)
    assert_page_shows(page, answer_for({name: good}))
    assert error.is_hidden() and page.get_attribute("[data-calc]", "data-stale") is None
    assert recorder.errors == []


def test_the_worker_failing_keeps_the_build_time_numbers(open_page):
    """If Pyodide cannot start the page says so and keeps the numbers computed at build time."""
    page, _ = open_page(wait_live=False, route=("**/*.whl", lambda route: route.fulfill(status=404, body="")))
    page.wait_for_selector("[data-calc][data-state=failed]", timeout=LIVE_TIMEOUT_MS)
    assert "could not start" in page.text_content("[data-calc-status]")
    assert_page_shows(page, DEFAULT)


def test_nothing_leaves_the_origin_and_the_console_stays_clean(open_page):
    """A full session (load, live, inputs, animation) requests only local files and logs no error."""
    page, recorder = open_page()
    change(page, "seq", "1024")
    change(page, "preset", "decoder")
    page.click('[data-anim="play"]')
    page.wait_for_timeout(300)
    page.click('[data-anim="play"]')
    page.goto(settled_url(page).split("?")[0] + "results/")
    assert recorder.foreign() == []
    assert recorder.errors == []
    local = {urlparse(u).path for u in recorder.requests}
    assert any(p.endswith("pyodide.asm.wasm") for p in local)
    assert any(p.endswith(".whl") for p in local)


@pytest.mark.parametrize("path", ["", "results/"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_accessibility_violations(open_page, scheme, path):
    """axe-core finds no serious or critical violations on either page, in either colour scheme."""
    from axe_playwright_python.sync_playwright import Axe

    page, _ = open_page(path, wait_live=not path, color_scheme=scheme)
    page.wait_for_timeout(300)  # Material's own scripts finish laying out the page
    violations = Axe().run(page).response["violations"]
    serious = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in violations
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == []


def test_the_animation_works_from_the_keyboard(open_page):
    """Play, pause, step and the scrubber respond to keys, and the peak event is marked."""
    page, recorder = open_page()
    step = DEFAULT["step"]
    label = page.locator('[data-anim="label"]')
    assert "(the peak)" in label.text_content()
    play = page.locator('[data-anim="play"]')
    play.focus()
    page.keyboard.press("Enter")
    assert play.get_attribute("aria-pressed") == "true"
    page.wait_for_timeout(250)
    page.keyboard.press("Space")
    assert play.get_attribute("aria-pressed") == "false"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # "Next event"
    before = int(page.input_value('[data-anim="scrub"]'))
    page.keyboard.press("Enter")
    assert int(page.input_value('[data-anim="scrub"]')) == before + 1
    page.keyboard.press("Tab")  # the scrubber
    page.keyboard.press("Home")
    assert page.input_value('[data-anim="scrub"]') == "0"
    assert label.text_content().startswith(f"Event 1 of {len(step['events'])}")
    page.keyboard.press("End")
    assert label.text_content().startswith(f"Event {len(step['events'])} of")
    page.keyboard.press("ArrowLeft")
    assert page.input_value('[data-anim="scrub"]') == str(len(step["events"]) - 2)
    assert page.locator("[data-chart=walk] .calc-peak-marker").count() == 1
    assert recorder.errors == []


# At the first answer for the new model ("calc:numbers", the step just drawn): whether Play still plays, where.
# Watched before the change is made (an idle machine answers before a listener added after select_option), and
# given up after 30 s, so a missed event fails the test instead of hanging the run.
WATCH_NEW_STEP = """() => { window.__atNew = new Promise(resolve => document.querySelector('[data-calc]')
    .addEventListener('calc:numbers', () => { const scrub = document.querySelector('[data-anim="scrub"]');
      resolve({pressed: document.querySelector('[data-anim="play"]').getAttribute('aria-pressed'),
               index: Number(scrub.value), last: Number(scrub.max)}); }, {once: true})); }"""
AT_NEW_STEP = """() => Promise.race([window.__atNew, new Promise((_, reject) =>
    setTimeout(() => reject(new Error("no new step's numbers within 30 s")), 30000))])"""


def test_a_new_model_while_playing_plays_on_from_the_same_point(open_page):
    """Play from event 61 of LLaMA 7B's step, then choose GPT-2's shorter step (issue 20's last pass, minor 5):
    the animation plays on from the same point of the new step (it stopped at the last event before)."""
    page, recorder = open_page()
    before = len(DEFAULT["step"]["events"])
    after = len(answer_for({"preset": "gpt2"})["step"]["events"])
    assert after - 1 < 60  # the point is past the new step's end
    page.evaluate("""() => { const scrub = document.querySelector('[data-anim="scrub"]');
                       scrub.value = 60; scrub.dispatchEvent(new Event('input')); }""")
    page.click('[data-anim="play"]')
    page.evaluate(WATCH_NEW_STEP)
    page.select_option('[data-calc-form] [name="preset"]', "gpt2")
    got = page.evaluate(AT_NEW_STEP)
    assert got["pressed"] == "true" and got["last"] == after - 1, got
    assert round(60 * (after - 1) / (before - 1)) <= got["index"] < after - 1, got
    page.wait_for_function(f"() => Number(document.querySelector('[data-anim=\"scrub\"]').value) > {got['index']}")
    assert recorder.errors == []


def test_screenshot_of_the_calculator_for_review(open_page):
    """Saves test-artifacts/calculator-light.png and calculator-dark.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    for scheme in ("light", "dark"):
        page, _ = open_page(color_scheme=scheme)
        page.add_style_tag(content=".md-header { position: absolute; }")  # not stitched over the shot
        page.locator("#calculator").screenshot(path=str(ARTIFACTS / f"calculator-{scheme}.png"))
        assert (ARTIFACTS / f"calculator-{scheme}.png").stat().st_size > 10_000


def eager_shown(page) -> dict:
    """The eager walk's figure, its measured band and its link, or the reason it is not shown."""
    return page.evaluate(
        """() => {
             const q = (s) => document.querySelector(s);
             const peak = q('[data-out="eager-peak"]'), band = q('[data-out="eager-band"]');
             const reason = q('[data-out="eager-reason"]'), link = q('[data-calc-eager] a');
             return {peak: peak && Number(peak.dataset.bytes), text: peak && peak.textContent,
                     low: band && Number(band.dataset.low), high: band && Number(band.dataset.high),
                     reason: reason && reason.textContent, href: link && link.href};
           }"""
    )


def test_what_pytorch_allocates_and_its_measured_error_follow_the_inputs(open_page, base_url):
    """Beside the deck's peak the page shows calc's eager walk for the same step, with the error measured on
    that model's code (the band results.md §10.8 tabulates) and a link to it; both follow the inputs."""
    bands = {kind: found[0] for kind, found in deck.eager_bands().items()}  # each kind's first: its bare loop's
    results = (ROOT / "docs" / "results.md").read_text()
    measured = [family for family, band in bands.items() if band["section"] == "10.8"]
    assert {"llama", "gpt2", "moe", "qwen3", "granite"} <= set(measured)
    for family in measured:  # the band spans its classes' rows in §10.8
        classes = deck.family_classes()[family]
        rows = [re.search(rf"^\| {c} \| (\d+) \| ([\d.]+) \| ([\d.]+) \|", results, re.M) for c in classes]
        assert all(rows), family
        assert bands[family]["runs"] == sum(int(m[1]) for m in rows)
        assert f"{bands[family]['low']:.4f}" == min(m[2] for m in rows)
        assert f"{bands[family]['high']:.4f}" == max(m[3] for m in rows)
    page, recorder = open_page()  # the default recipe (mixed precision) was not measured: the page says so
    line = page.locator("[data-calc-eager]")  # each walk's default attention: the deck's keeps the scores
    assert line.text_content().startswith("What PyTorch allocates for this step with sdpa attention, where the "
                                          "peak above keeps eager attention's s x s scores (--walk eager: ")
    shown = eager_shown(page)
    assert shown["peak"] == DEFAULT["eager"]["peak"] and shown["low"] is None
    assert shown["href"] == base_url + "results/#sec-10-8"
    change(page, "recipe", "autocast")  # measured: the band of those steps
    autocast = answer_for({"recipe": "autocast"})["eager"]
    shown = eager_shown(page)
    assert shown["peak"] == autocast["peak"] and shown["text"] == calc.units.format_size(shown["peak"])
    assert (shown["low"], shown["high"]) == (bands["llama"]["low"], bands["llama"]["high"])
    change(page, "attention", "eager")
    eager = answer_for({"recipe": "autocast", "attention": "eager"})["eager"]
    assert eager_shown(page)["peak"] == eager["peak"] != autocast["peak"]
    assert line.text_content().startswith("What PyTorch allocates for the same step (--walk eager: transformers' "
                                          "code, eager attention, ")
    change(page, "preset", "gpt2")  # its own sequence, 1,024, comes with it
    change(page, "seq", "512")
    gpt2 = answer_for({"recipe": "autocast", "attention": "eager", "seq": "512", "preset": "gpt2"})["eager"]
    shown = eager_shown(page)
    assert shown["peak"] == gpt2["peak"] and (shown["low"], shown["high"]) == (
        bands["gpt2"]["low"],
        bands["gpt2"]["high"],
    )
    change(page, "dp", "2")  # beside the deck's layout: the busiest rank of the engine that runs it, DDP
    asked = {"recipe": "autocast", "attention": "eager", "seq": "512", "preset": "gpt2", "dp": "2"}
    ddp = answer_for(asked)["eager"]
    assert eager_shown(page)["peak"] == ddp["peak"] > gpt2["peak"]  # its buckets: a second copy of the gradients
    assert "the busiest of 2 ranks of DDP" in line.text_content()
    change(page, "zero", "3")  # FSDP2, measured on the CPU only: the reason, and no figure
    assert "on the CPU with gloo only" in eager_shown(page)["reason"] and eager_shown(page)["peak"] is None
    assert recorder.errors == []


def test_the_measured_error_shown_is_that_of_the_steps_like_this_one(open_page, base_url):
    """A mixture of experts shows the error measured on Mixtral and Qwen2-MoE, LoRA that of peft's steps and
    QLoRA that of bitsandbytes' (results §10.8, §12.4, §12.5), each linked to its section; a recipe or an
    optimizer no measured step ran shows none."""
    bands = {kind: found[0] for kind, found in deck.eager_bands().items()}  # each kind's first: its bare loop's
    page, recorder = open_page("?recipe=autocast")  # a recipe the measured steps ran
    change(page, "preset", "mixtral-8x7b")
    shown = eager_shown(page)
    assert shown["peak"] == answer_for({"preset": "mixtral-8x7b", "recipe": "autocast"})["eager"]["peak"]
    assert (shown["low"], shown["high"]) == (bands["moe"]["low"], bands["moe"]["high"]) != (
        bands["llama"]["low"], bands["llama"]["high"])
    assert shown["href"] == base_url + "results/#sec-10-8"
    change(page, "preset", "llama-7b")
    for mode, band, section in (("lora", "lora", "12-4"), ("qlora", "qlora", "12-5"), ("freeze", "lora", "12-4")):
        change(page, "recipe", "bf16" if mode == "qlora" else "autocast")  # QLoRA's steps ran bf16
        change(page, "finetune", mode)
        shown = eager_shown(page)
        assert (shown["low"], shown["high"]) == (bands[band]["low"], bands[band]["high"]), mode
        assert shown["href"] == base_url + f"results/#sec-{section}", mode
    change(page, "optimizer", "lion")  # no measured LoRA step ran Lion
    assert eager_shown(page)["low"] is None
    assert recorder.errors == []


def test_the_eager_figure_links_to_its_table(open_page):
    """The link beside the eager figure opens results §10.8, whose heading is there."""
    page, _ = open_page()
    page.click("[data-calc-eager] a")
    page.wait_for_selector("#sec-10-8")
    assert "transformers" in page.text_content("#sec-10-8")


def test_a_measured_band_of_one_value_is_said_once(open_page):
    """OLMo 2 in fp32 was measured within 0.00% on every step: the band reads "predicted 100.00% of the
    measured peak", not "100.00% to 100.00%"; the figures in the data attributes are the band's."""
    page, recorder = open_page("?preset=olmo-2-13b&recipe=fp32-full&seq=512")
    shown = eager_shown(page)
    low, high = f"{100 * shown['low']:.2f}%", f"{100 * shown['high']:.2f}%"
    assert low == high, "the band this test reads is one value at two decimals"
    text = page.text_content('[data-out="eager-band"]')
    assert f"it predicted {low} of the measured peak" in text and " to " not in text.split("predicted")[1]
    assert recorder.errors == []
