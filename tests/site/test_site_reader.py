"""The page as readers meet it (issue 9), in Debian's Chromium: hostile and untidy links, the field
being edited, a calculator that cannot start or is still loading, the planner never delaying a
redraw, large sizes, a sub-path 404 page, visible focus and every page's width."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import LIVE_TIMEOUT_MS, Recorder, answer_for, built_site, rendered_table, settled_url

import calc
from calc.units import format_size
from scripts import site_browser

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change, assert_page_shows = calculator_tests.change, calculator_tests.assert_page_shows
DEFAULT = answer_for({})
PAGES = ["", "beyond/", "practice/", "finetune/", "results/"]


def wait_live_source(page) -> None:
    page.wait_for_function("() => document.querySelector('[data-calc]').dataset.source === 'live'")


def form_values(page) -> dict[str, str]:
    """Every field's value as the reader sees it (a checkbox as "true"/"false")."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelector('[data-calc-form]').elements]
             .filter(e => e.name).map(e => [e.name, e.type === 'checkbox' ? String(e.checked) : e.value]))"""
    )


def link_problems(page) -> dict[str, str]:
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('[data-link-problem]')]
             .map(li => [li.dataset.linkProblem, li.textContent]))"""
    )


# ------------------------------------------------------------------ links

@pytest.mark.parametrize("name", ["__proto__", "constructor", "toString", "hasOwnProperty", "valueOf"])
def test_a_preset_named_like_an_object_property_is_refused_by_name(open_page, name):
    """?preset=__proto__ is looked up as data: the default model, no "undefined" field, the presets listed."""
    page, recorder = open_page(f"?preset={name}&micro-batch=2")
    wait_live_source(page)
    values = form_values(page)
    assert "undefined" not in values.values() and "" not in [values[k] for k in ("preset", "norm", "positions")]
    assert values["preset"] == "llama-7b" and values["layers"] == "32"
    assert_page_shows(page, answer_for({"micro-batch": "2"}))  # the link's other setting is kept
    problem = link_problems(page)["preset"]
    assert all(preset in problem for preset in calc.PRESETS)
    assert recorder.errors == []


def test_choices_and_switches_are_read_as_calc_reads_them(open_page):
    """FULL, Mixed, 1 and yes are what calc accepts: the page shows calc's answer for them, no notice (a link's
    flash, which has no control of its own, is calc's --attention sdpa)."""
    page, recorder = open_page("?recompute=FULL&recipe=Mixed&tied=1&flash=yes&bias=0")
    wait_live_source(page)
    values = form_values(page)
    assert (values["recompute"], values["recipe"], values["tied"], values["bias"]) == (
        "full", "mixed", "true", "false")
    assert_page_shows(page, answer_for({"recompute": "full", "tied": "true", "flash": "true"}))
    assert page.text_content('[data-out="peak"]') == format_size(answer_for(
        {"recompute": "full", "tied": "true", "flash": "true"})["step"]["peak"])
    assert page.locator("[data-calc-notice]").is_hidden()
    assert recorder.errors == []


@pytest.mark.parametrize(
    ("param", "value", "default"),
    [("recipe", "__proto__", "mixed"), ("zero", "9", "0"), ("norm", "bogus", "rms"), ("recompute", "most", "none"),
     ("tied", "maybe", "false"), ("positions", "constructor", "rope")],
)
def test_a_bad_choice_falls_back_alone_and_is_named(open_page, param, value, default):
    """Only the bad field takes its default (never a blank dropdown); the notice names it; the rest applies."""
    page, recorder = open_page(f"?{param}={value}&seq=2048&dp=2")
    wait_live_source(page)
    values = form_values(page)
    assert values[param] == default
    assert (values["seq"], values["dp"]) == ("2048", "2")
    assert_page_shows(page, answer_for({"seq": "2048", "dp": "2"}))
    problems = link_problems(page)
    assert list(problems) == [param] and value in problems[param]
    assert recorder.errors == []


def test_parameters_that_are_not_settings_are_ignored(open_page):
    """utm_source, fbclid and the like do not cost a shared link its settings, nor raise a notice."""
    page, recorder = open_page("?utm_source=news&seq=8192&fbclid=IwAR0x&recompute=selective&ref=")
    wait_live_source(page)
    assert_page_shows(page, answer_for({"seq": "8192", "recompute": "selective"}))
    assert page.locator("[data-calc-notice]").is_hidden()
    assert parse_qs(urlparse(settled_url(page)).query) == {"seq": ["8192"], "recompute": ["selective"]}
    assert recorder.errors == []


def test_a_repeated_setting_is_named_and_its_first_value_used(open_page):
    """?seq=8192&seq=1024 uses 8,192 and says that seq was given twice (not "unknown")."""
    page, recorder = open_page("?seq=8192&seq=1024")
    wait_live_source(page)
    assert_page_shows(page, answer_for({"seq": "8192"}))
    problem = link_problems(page)["seq"]
    assert "2 times" in problem and "8192" in problem and "know" not in problem
    assert recorder.errors == []


def test_an_unknown_preset_is_named_with_the_valid_ones_and_the_rest_kept(open_page):
    """?preset=gpt-5&seq=2048: the default model at 2,048, and the notice lists every preset."""
    page, _ = open_page("?preset=gpt-5&seq=2048")
    wait_live_source(page)
    assert_page_shows(page, answer_for({"seq": "2048"}))
    problem = link_problems(page)["preset"]
    assert "gpt-5" in problem and all(preset in problem for preset in calc.PRESETS)


@pytest.mark.parametrize("value", ["9" * 5000, "x" * 10_000])
def test_a_huge_value_in_a_link_is_named_briefly(open_page, value):
    """5,000 digits or 10,000 characters: the field is named, the value is not echoed whole, no Python error."""
    page, recorder = open_page(f"?seq={value}&micro-batch=2", viewport={"width": 390, "height": 800})
    wait_live_source(page)
    assert_page_shows(page, answer_for({"micro-batch": "2"}))
    notice = page.locator("[data-calc-notice]")
    text = notice.text_content()
    assert "Sequence" in text and len(text) < 400
    assert "ValueError" not in text and "set_int_max_str_digits" not in text
    assert notice.bounding_box()["height"] < 250
    assert recorder.errors == []


def test_a_huge_value_typed_in_a_field_is_named_beside_it(open_page):
    """A 5,000-digit sequence typed in the form gets a short message beside Sequence; the page keeps working."""
    page, recorder = open_page()
    page.fill('[data-calc-form] [name="seq"]', "9" * 5000)
    error = page.locator('[data-error-for="seq"]')
    error.wait_for(state="visible")
    assert error.text_content().startswith("Sequence") and len(error.text_content()) < 120
    assert_page_shows(page, DEFAULT)
    assert recorder.errors == []


# ------------------------------------------------------------------ the field being edited

def test_an_emptied_sequence_is_not_refilled_while_the_reader_types(open_page):
    """Ctrl+A, Backspace, a pause, then 2048: the field reads 2048 (not 40962048) and so do table and URL."""
    page, recorder = open_page()
    seq = page.locator('[data-calc-form] [name="seq"]')
    seq.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Backspace")
    page.wait_for_timeout(900)  # the old page refilled 4096 after about 300 ms
    assert seq.input_value() == ""
    assert "4,096" in page.text_content('[data-hint-for="seq"]')
    page.evaluate(
        """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
             .addEventListener('calc:drawn', e => { if (document.querySelector('[name=seq]').value === '2048')
               resolve(e.detail.source); })); }"""
    )
    page.keyboard.type("2048", delay=120)
    page.evaluate(calculator_tests.AWAIT_DRAWN)
    page.wait_for_timeout(500)
    assert seq.input_value() == "2048"
    assert_page_shows(page, answer_for({"seq": "2048"}))
    assert parse_qs(urlparse(settled_url(page)).query)["seq"] == ["2048"]
    assert recorder.errors == []


def test_typing_writes_the_address_once_the_reader_pauses_and_a_choice_at_once(open_page):
    """Issue 21: each address written costs the browser a same-document navigation (some 10 ms of CPU here), so
    a sequence typed key by key, each key redrawn, is written once, after the pause (address.js), into the entry
    it is in; a preset chosen next gets its entry at once, after the typing."""
    page, recorder = open_page()
    page.evaluate(
        """() => { window.__writes = [];
             for (const name of ['replaceState', 'pushState']) {
               const real = history[name].bind(history);
               history[name] = (...args) => { window.__writes.push([name, String(args[2])]); return real(...args); };
             } }"""
    )
    seq = page.locator('[data-calc-form] [name="seq"]')
    seq.click()
    page.keyboard.press("Control+A")
    page.evaluate(
        """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
             .addEventListener('calc:drawn', e => { if (document.querySelector('[name=seq]').value === '12288')
               resolve(e.detail.source); })); }"""
    )
    page.keyboard.type("12288", delay=40)  # each key answered before the next, or superseded
    page.evaluate(calculator_tests.AWAIT_DRAWN)
    assert parse_qs(urlparse(settled_url(page)).query) == {"seq": ["12288"]}
    # once, or twice where a loaded machine delivered two keys more than the pause apart (seen in CI): never a
    # write a key, and never a new history entry
    names = [name for name, _ in page.evaluate("() => window.__writes")]
    assert 1 <= len(names) <= 2 and set(names) == {"replaceState"}, names
    page.evaluate("() => { window.__writes = []; }")
    change(page, "seq", "8192")  # typed again, then a choice before the pause: the typing first, then the entry
    page.select_option('[data-calc-form] [name="preset"]', "mistral-7b")
    page.wait_for_function("() => window.__writes.length === 2", timeout=30_000)
    writes = page.evaluate("() => window.__writes")
    assert [name for name, _ in writes] == ["replaceState", "pushState"]
    assert "seq=8192" in writes[0][1] and "preset=mistral-7b" in writes[1][1]
    assert recorder.errors == []


def test_an_emptied_shape_field_says_which_value_it_uses(open_page):
    """Emptying Layers is not silent: the hint beside it names the preset's 32."""
    page, _ = open_page()
    change(page, "layers", "")
    assert page.input_value('[data-calc-form] [name="layers"]') == ""
    assert page.text_content('[data-hint-for="layers"]') == "Empty: uses the preset's 32."
    assert page.get_attribute('[data-calc-form] [name="layers"]', "placeholder") == "32"


# ------------------------------------------------------------------ sizes and limits

def test_a_long_sequence_with_flash_and_full_recomputation_is_computed(open_page):
    """llama-7b at 524,288 tokens with FlashAttention and full recomputation: about 334 GB, not refused."""
    page, recorder = open_page("?seq=524288&flash=true&recompute=full")
    wait_live_source(page)
    want = answer_for({"seq": "524288", "flash": "true", "recompute": "full"})
    assert 330e9 < want["step"]["peak"] < 340e9
    assert_page_shows(page, want)
    assert page.locator("[data-calc-notice]").is_hidden()
    assert recorder.errors == []


def test_large_sizes_read_in_tb_with_separators(open_page):
    """Sequence 409,620 without FlashAttention peaks near 861,076 GB: the page writes 861.1 TB, in TB on the axes."""
    page, _ = open_page("?seq=409620")
    wait_live_source(page)
    peak = answer_for({"seq": "409620"})["step"]["peak"]
    assert page.text_content('[data-out="peak"]') == format_size(peak) == "861.1 TB"
    assert "(TB)" in page.text_content("[data-chart=breakdown] .calc-axis")
    assert all("," in t or len(t) < 5 for t in page.eval_on_selector_all(
        "[data-calc-table] td[data-part]", "tds => tds.map(td => td.textContent.split('.')[0])"))


# ------------------------------------------------------------------ starting, loading, failing

def test_opened_from_disk_the_page_says_the_calculator_cannot_start(browser):
    """file://: a clear message, disabled fields that agree with the build-time numbers, no page error."""
    context = browser.new_context()
    page = context.new_page()
    recorder = Recorder("file://")
    recorder.attach(page)
    page.goto((built_site() / "index.html").as_uri() + "?seq=8192")
    page.wait_for_selector("[data-calc][data-state=failed]", timeout=10_000)
    status = page.text_content("[data-calc-status]")
    assert "could not start" in status and "from a file" in status
    assert page.input_value('[name="seq"]') == "4096"
    assert page.eval_on_selector_all("[data-calc-form] fieldset", "fs => fs.every(f => f.disabled)")
    assert rendered_table(page) == calculator_tests.expected_table(DEFAULT)
    assert page.locator("[data-calc-progress]").is_hidden()
    assert page.locator("[data-plan-load-note]").is_visible()
    assert [e for e in recorder.errors if "Failed to load resource" not in e] == []
    context.close()


@pytest.mark.parametrize(("missing", "words"), [("Worker", "Web Workers"), ("WebAssembly", "WebAssembly")])
def test_without_workers_or_webassembly_the_page_says_so(browser, base_url, missing, words):
    """A browser without Web Workers or WebAssembly gets the reason and the build-time numbers."""
    context = browser.new_context()
    context.add_init_script(f"delete window.{missing};")
    page = context.new_page()
    page.goto(base_url)
    page.wait_for_selector("[data-calc][data-state=failed]", timeout=10_000)
    assert words in page.text_content("[data-calc-status]")
    assert rendered_table(page) == calculator_tests.expected_table(DEFAULT)
    assert page.eval_on_selector_all("[data-calc-form] fieldset", "fs => fs.every(f => f.disabled)")
    context.close()


FAKE_WORKER = """postMessage({progress: {done: 3000000, total: 12000000, label: "Python runtime"}});
onmessage = () => {};"""


def test_while_loading_progress_shows_and_edits_say_they_wait(open_page):
    """A progress bar follows the worker's progress messages; an early edit says it waits; Load says why not yet."""
    route = ("**/calc-worker.mjs*", lambda r: r.fulfill(status=200, content_type="text/javascript", body=FAKE_WORKER))
    page, recorder = open_page(wait_live=False, route=route)
    page.wait_for_function("() => document.querySelector('[data-calc-progress] progress').value > 0")
    assert page.eval_on_selector("[data-calc-progress] progress", "p => [p.value, p.max]") == [3_000_000, 12_000_000]
    assert page.text_content("[data-progress-label]") == "Python runtime: 3.0 of 12.0 MB"
    assert page.locator("[data-calc-pending]").is_hidden()
    page.fill('[data-calc-form] [name="seq"]', "8192")
    assert page.locator("[data-calc-pending]").is_visible()
    assert "once the live calculator has started" in page.text_content("[data-calc-pending]")
    assert page.get_attribute("[data-calc]", "data-stale") == "true"
    assert page.locator("[data-plan-load-note]").is_visible()
    assert page.locator("[data-plan-use]").first.get_attribute("aria-describedby") == "calc-plan-load-note"
    assert recorder.errors == []


def test_without_progress_messages_the_bar_is_indeterminate_and_goes_once_live(open_page):
    """The page tolerates a worker that sends no progress: an indeterminate bar until live, then none."""
    page, _ = open_page(wait_live=False)
    page.wait_for_selector("[data-calc-progress]:not([hidden])", timeout=10_000)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=LIVE_TIMEOUT_MS)
    assert page.locator("[data-calc-progress]").is_hidden()
    assert page.locator("[data-plan-load-note]").is_hidden()
    assert page.locator("[data-plan-use]").first.is_enabled()


# ------------------------------------------------------------------ the planner never delays a redraw

def test_a_redraw_while_the_planner_runs_is_answered_before_that_plan_is_done(open_page):
    """One runtime for the page (issue 21): the worker works out a plan in slices and answers a reader's change
    between them, so an edit made while a plan is being computed is drawn before that plan is done. The times
    are printed."""
    page, recorder = open_page("?preset=llama-2-70b")
    page.wait_for_selector("[data-planner][data-plan-source=live][data-plan-state=ready]", timeout=LIVE_TIMEOUT_MS)
    waits, plans, drawn = [], [], []
    for i, batch in enumerate(["512", "256", "2048", "128", "4096"]):
        # In the page: ask a new plan, and the moment the worker takes it, change the sequence.
        first, full, plan_done = page.evaluate(
            """([batch, seq]) => new Promise(resolve => {
                 const root = document.querySelector('[data-calc]');
                 const planner = document.querySelector('[data-planner]');
                 const set = (name, value) => {
                   const field = document.querySelector(`[data-calc-form] [name="${name}"]`);
                   field.value = value;
                   field.dispatchEvent(new Event('input', {bubbles: true}));
                 };
                 let start = null, planDone = null;
                 const watch = new MutationObserver(() => {
                   if (start !== null) {  // the plan taken before the edit is done
                     if (!planner.dataset.planBusy && planDone === null) planDone = performance.now() - start;
                     return;
                   }
                   if (!planner.dataset.planBusy) return;
                   start = performance.now();
                   let first = null;
                   root.addEventListener('calc:numbers', () => { first = performance.now() - start; }, {once: true});
                   root.addEventListener('calc:drawn', () => {
                     watch.disconnect();
                     resolve([first, performance.now() - start, planDone]);
                   }, {once: true});
                   set('seq', seq);
                 });
                 watch.observe(planner, {attributes: true, attributeFilter: ['data-plan-busy']});
                 set('global-batch', batch);
               })""",
            [batch, str(2048 + i)],
        )
        waits.append(first)
        drawn.append(full)
        plans.append(plan_done)
        page.wait_for_selector("[data-planner][data-plan-state=ready]", timeout=LIVE_TIMEOUT_MS)
    done_ms = [ms and round(ms) for ms in plans]
    print(f"while the planner ran: numbers redrawn in {[round(ms) for ms in waits]} ms, with the sweep in "
          f"{[round(ms) for ms in drawn]} ms; the plan under way was done after {done_ms} ms (None: after the sweep)")
    assert all(done is None or first < done for done, first in zip(plans, waits, strict=True))  # None: not yet
    assert_page_shows(page, answer_for({"preset": "llama-2-70b", "global-batch": batch, "seq": str(2048 + i)}))
    assert recorder.errors == []


# Every message the page's workers send, and every question the page posts them, in order.
WORKER_LOG = """window.__worker = [];
const Native = window.Worker;
window.Worker = class extends Native {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", ({ data }) => window.__worker.push({ said: data }));
  }
  postMessage(data, ...rest) {
    window.__worker.push({ asked: data });
    return super.postMessage(data, ...rest);
  }
};"""


def test_an_idle_worker_warms_its_code_and_answers_nothing_unasked(browser, base_url):
    """Issue 21: once idle, the worker runs the last change's questions again, so that Chromium optimises their
    WebAssembly before the reader's next change (calc-worker.mjs, WARM_RUNS); it answers nothing for them. A
    change made once it may be warming is drawn with calc's numbers, every answer is for a question the page
    asked, and the warming ends with one {warmed} message, and one more for another model."""
    context = browser.new_context()
    context.add_init_script(WORKER_LOG)
    page = context.new_page()
    recorder = Recorder(base_url)
    recorder.attach(page)
    page.goto(base_url)
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=LIVE_TIMEOUT_MS)
    page.wait_for_timeout(200)  # idle for longer than WARM_IDLE_MS: the warming may have begun
    calculator_tests.change(page, "seq", "3000")
    page.wait_for_function("window.__worker.some(m => m.said?.warmed)", timeout=30_000)
    page.wait_for_timeout(500)  # nothing more comes once warmed
    log = page.evaluate("window.__worker")
    asked = [m["asked"]["id"] for m in log if "id" in m.get("asked", {})]
    answered = [m["said"]["id"] for m in log if "id" in m.get("said", {})]
    warmed = [m["said"]["warmed"] for m in log if "warmed" in m.get("said", {})]
    assert len(warmed) == 1 and warmed[0] > 0
    assert sorted(answered) == sorted(set(answered)) and set(answered) <= set(asked)
    assert_page_shows(page, answer_for({"seq": "3000"}))
    # Another model's code warms again, once: its family's layers ran only for its first answers.
    calculator_tests.change(page, "preset", "qwen3-8b")
    page.wait_for_function("window.__worker.filter(m => m.said?.warmed).length === 2", timeout=30_000)
    calculator_tests.change(page, "seq", "2048")  # the same model: no warming after it
    page.wait_for_timeout(1000)
    assert sum("warmed" in m.get("said", {}) for m in page.evaluate("window.__worker")) == 2
    assert recorder.errors == []
    context.close()


CHART_WIDTHS = """() => [...document.querySelectorAll('[data-chart]')].map(c => [c.dataset.chart,
  Math.max(280, Math.round(c.clientWidth || 640)), Number(c.querySelector('svg').getAttribute('width'))])"""


def test_the_charts_follow_a_resized_window_and_the_next_change_keeps_the_new_width(open_page):
    """The charts are drawn at their containers' widths, which a redraw keeps rather than reads again
    (calculator/svg.js withWidths: a read after the change's writes lays the page out again); a resize forgets
    them. Each chart is redrawn at the new width, and so is the next change's."""
    page, recorder = open_page(viewport={"width": 1280, "height": 900})
    drawn_at = {}
    for width in (390, 1280, 768):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_function(f"({CHART_WIDTHS})().every(([, want, drawn]) => want === drawn)", timeout=10_000)
        change(page, "seq", str(2000 + width))
        charts = page.evaluate(CHART_WIDTHS)
        assert [want for _, want, _ in charts] == [drawn for _, _, drawn in charts], charts
        drawn_at[width] = {drawn for _, _, drawn in charts}
    assert len({frozenset(widths) for widths in drawn_at.values()}) == 3, drawn_at  # each window's own widths
    assert recorder.errors == []


def test_the_planner_column_says_per_step_like_its_field(open_page):
    """The planner's column and the field both say "Micro-batches per step"."""
    page, _ = open_page(wait_live=False, java_script_enabled=False)
    headers = page.eval_on_selector_all("[data-plan-table] thead th", "ths => ths.map(th => th.textContent.trim())")
    assert "Micro-batches per step" in headers and "Micro-batches a step" not in headers
    assert page.text_content('label[for="calc-grad-accum"]') == "Micro-batches per step"


# ------------------------------------------------------------------ hosting

@pytest.mark.parametrize("prefix", ["/course/memory/", "/"])
def test_the_404_page_works_under_a_sub_path_at_any_depth(browser, prefix):
    """Served for a missing path, 404.html is styled, its icons small, and every link stays in the site."""
    with site_browser.serve(built_site(), prefix=prefix) as root:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        response = page.goto(root + "no/such/page/")
        assert response.status == 404
        assert page.text_content("h1").startswith("404")
        assert page.evaluate("getComputedStyle(document.querySelector('.md-header')).position") == "sticky"
        biggest_icon = page.evaluate(
            "Math.max(...[...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width))")
        assert biggest_icon <= 48
        links = page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
        assert links and all(link.startswith(root) for link in links), links
        assert {root, root + "beyond/", root + "results/"} <= set(links)
        page.click("a[href$='beyond/']")
        assert settled_url(page) == root + "beyond/"
        page.wait_for_function("document.title.includes('Beyond')")  # the address commits before the title
        assert errors == []
        context.close()


# ------------------------------------------------------------------ screens

CONTROLS = {
    "text field": '[data-calc-form] [name="seq"]',
    "checkbox": '[data-calc-form] [name="sequence-parallel"]',
    "select": '[data-calc-form] [name="recipe"]',
    "scrubber": '[data-anim="scrub"]',
    "button": '[data-anim="play"]',
    "planner row button": "[data-plan-use]",
    "details summary": ".calc-data summary",
}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_focus_is_visible_on_every_control(open_page, scheme):
    """Focused from the keyboard, each kind of control draws an outline: its screenshot differs from unfocused."""
    page, _ = open_page(color_scheme=scheme)
    page.add_style_tag(content=".md-header { position: absolute; } * { transition: none !important; }")
    for name, selector in CONTROLS.items():
        control = page.locator(selector).first
        control.scroll_into_view_if_needed()
        page.evaluate("document.activeElement?.blur()")
        box = control.bounding_box()
        clip = {"x": box["x"] - 6, "y": box["y"] - 6, "width": box["width"] + 12, "height": box["height"] + 12}
        before = page.screenshot(clip=clip)
        page.keyboard.press("Shift")  # keyboard modality, so :focus-visible applies as for Tab
        control.focus()
        outline = control.evaluate(
            "e => [getComputedStyle(e).outlineStyle, parseFloat(getComputedStyle(e).outlineWidth)]")
        after = page.screenshot(clip=clip)
        assert outline[0] != "none" and outline[1] >= 2, (name, outline)
        assert before != after, f"{name}: focused and unfocused look the same"


@pytest.mark.parametrize("width", [390, 768, 1280])
def test_every_page_fits_its_width_with_readable_chart_text(open_page, width, base_url):
    """No page scrolls sideways at 390, 768 or 1280 px, and the charts' text is at least 11 px."""
    for path in [*PAGES, "no/such/page/"]:
        page, _ = open_page(path, wait_live=path == "", viewport={"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width, path
        if path == "":
            sizes = page.eval_on_selector_all(
                "[data-chart] svg text",
                """ts => ts.map(t => parseFloat(getComputedStyle(t).fontSize)
                        * t.ownerSVGElement.getBoundingClientRect().width / t.ownerSVGElement.viewBox.baseVal.width)""",
            )
            assert sizes and min(sizes) >= 11, min(sizes)
            assert page.evaluate("document.querySelector('[data-calc-table]').scrollWidth") <= width


def test_no_flag_in_running_text_breaks_after_its_dashes(open_page):
    """At 390 px, every --flag in inline code (the pages' and the live calculator's) sits on one line."""
    broken, seen = [], 0
    for path in PAGES:
        page, _ = open_page(path, wait_live=path == "", viewport={"width": 390, "height": 900})
        lines = page.eval_on_selector_all(
            "code .calc-flag",
            "fs => fs.map(f => [f.textContent, new Set([...f.getClientRects()].map(r => r.top)).size])",
        )
        seen += len(lines)
        broken += [(path, text) for text, n in lines if n != 1]
        if path == "":
            assert page.locator("[data-calc-eager] code .calc-flag").text_content() == "--walk"
    assert seen > 20 and broken == []


def test_wide_formulas_fit_or_scroll_inside_their_box_and_take_the_keyboard(open_page):
    """At 390 px a formula wider than the column is set smaller (to 70% at least) and, if still too wide,
    scrolls in a focusable, named region; at 1280 px every formula is at full size."""
    for width in (390, 1280):
        page, _ = open_page("beyond/", wait_live=False, viewport={"width": width, "height": 900})
        page.wait_for_timeout(300)
        displays = page.eval_on_selector_all(
            ".katex-display",
            """ds => ds.map(d => ({scrolls: d.scrollWidth > d.clientWidth, tab: d.tabIndex,
                   role: d.getAttribute('role'), scale: parseFloat(getComputedStyle(d.querySelector('.katex')).fontSize)
                          / parseFloat(getComputedStyle(d).fontSize)}))""",
        )
        assert displays
        for d in displays:
            assert not d["scrolls"] or (d["tab"] == 0 and d["role"] == "region"), d
            assert d["scale"] >= (0.69 if width == 390 else 1.0), d
        if width == 390:
            assert any(d["scale"] < 1 for d in displays)  # the ZeRO stages' block was made to fit


@pytest.mark.parametrize(("width", "narrow"), [(390, True), (1280, False)])
def test_the_results_figures_take_their_phone_width_variant_on_a_phone(open_page, width, narrow):
    """On a 390 px screen the Results page shows the -narrow figures (10-point text stays above 11 px)."""
    page, _ = open_page("results/", wait_live=False, viewport={"width": width, "height": 900})
    page.wait_for_function("() => [...document.querySelectorAll('picture img')].every(i => i.complete)")
    sources = page.eval_on_selector_all("article picture img", "is => is.map(i => i.currentSrc)")
    assert len(sources) == 3
    assert all(src.endswith("-narrow.svg") == narrow for src in sources), sources
    shown = page.eval_on_selector_all("article picture img", "is => is.map(i => i.getBoundingClientRect().width)")
    natural = page.eval_on_selector_all("article picture img", "is => is.map(i => i.naturalWidth)")
    if narrow:  # drawn at about the column's width, so barely scaled down
        assert all(s / n >= 0.85 for s, n in zip(shown, natural, strict=True)), (shown, natural)


def test_screenshots_of_every_page_for_review(open_page):
    """Saves test-artifacts/pages/PAGE-WIDTH-SCHEME.png: every page at 390, 768 and 1280 px, light and dark."""
    out = Path(calculator_tests.ARTIFACTS) / "pages"
    out.mkdir(parents=True, exist_ok=True)
    pages = [("", "memory"), ("beyond/", "beyond"), ("practice/", "practice"), ("finetune/", "finetune"),
             ("results/", "results"), ("no/such/page/", "404")]
    for path, name in pages:
        for width in (390, 768, 1280):
            for scheme in ("light", "dark"):
                page, _ = open_page(path, wait_live=path == "", color_scheme=scheme,
                                    viewport={"width": width, "height": 900})
                page.add_style_tag(content=".md-header { position: absolute; }")
                page.wait_for_timeout(200)
                target = out / f"{name}-{width}-{scheme}.png"
                page.screenshot(path=str(target), full_page=True)
                assert target.stat().st_size > 5_000
                page.context.close()
