"""The calculator as a careful reader and an attacker meet it, second pass (issue 20, items 1, 2, 3, 5, 7, 8, 9
and 15; issue 21's one runtime): what the page shows is what calc used, so the page, its link and the CLI agree."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import AWAIT_DRAWN, answer_for, expected_table, rendered_table, settled_url

from conftest import ROOT, cli_json

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change = calculator_tests.change
LLAMA2 = (ROOT / "tests" / "hf_configs" / "llama-2-7b.json").read_text()
PEAK = "() => Number(document.querySelector('[data-out=\"peak\"]').dataset.bytes)"
WATCH = """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
    .addEventListener('calc:drawn', e => resolve(e.detail.source), {once: true})); }"""


def query_of(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(settled_url(page)).query)


def settle(page) -> None:
    """Wait until the live answer for the form as it stands is drawn (no redraw pending)."""
    page.wait_for_function("() => document.querySelector('[data-calc]').dataset.source === 'live'")
    page.wait_for_timeout(400)


def paste(page, text: str) -> None:
    if not page.locator("[data-hf]").evaluate("d => d.open"):
        page.click("[data-hf] summary")
    page.fill('[name="hf-config"]', text)


def test_key_value_heads_shown_are_the_ones_calc_uses(open_page):
    """Item 1: `?heads=64&kv-heads=32` gives the CLI's `--heads 64 --kv-heads 32` and the link keeps 32; `?heads=16`
    shows the 16 key/value heads calc used (they follow heads, as in the CLI); typed, the same."""
    want = cli_json(["--heads", "64", "--kv-heads", "32"])["peak"]
    page, recorder = open_page("?heads=64&kv-heads=32")
    settle(page)
    assert page.evaluate(PEAK) == want
    assert page.input_value('[name="kv-heads"]') == "32" and query_of(page)["kv-heads"] == ["32"]
    again, _ = open_page("?heads=16")
    settle(again)
    assert again.input_value('[name="kv-heads"]') == "16"
    assert again.evaluate(PEAK) == answer_for({"heads": "16"})["step"]["peak"]
    change(again, "heads", "64")
    change(again, "kv-heads", "32")
    assert again.evaluate(PEAK) == want and query_of(again)["kv-heads"] == ["32"]
    assert recorder.errors == []


def test_deep_pastes_are_refused_in_the_page_and_a_real_config_still_answers(open_page):
    """Item 2: two pastes of 5,000 nested brackets are refused under the box before the worker; then a real
    config.json gives calc's answer, and no Python error is raised."""
    page, recorder = open_page()
    deep = "[" * 5000 + "]" * 5000
    for _ in range(2):
        paste(page, deep)
        error = page.locator('[data-error-for="hf-config"]')
        error.wait_for(state="visible")
        assert "nested 5,000 levels deep" in error.text_content()
    page.evaluate(WATCH)
    paste(page, LLAMA2)
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert rendered_table(page) == expected_table(answer_for({"hf-config": LLAMA2}))
    assert "restart" not in page.text_content("[data-calc-status]")
    assert recorder.errors == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [('{"a":' * 5000 + "1" + "}" * 5000, "nested 5,000 levels deep, where at most 32 are read"),  # an 80 KB link
     ('{"model_type":"llama","x":"' + "a" * 1_000_000 + '"}', "1,000,029 characters is not a config.json")],  # 1 MB
    ids=["deep", "1MB"],
)
def test_a_link_past_64_kb_reaches_the_page_which_refuses_its_config(open_page, text, reason):
    """A link holding a config nested 5,000 deep (80 KB) or a 1 MB one loads the page (the test server takes
    a request line past 64 KB, as a static host does), which refuses the config in its notice and answers for
    the defaults."""
    from urllib.parse import quote

    page, recorder = open_page("?hf-config=" + quote(text, safe=""))
    notice = page.locator("[data-calc-notice]")
    assert "config.json: refused, as the config box refuses it: " in notice.text_content()
    assert reason in notice.text_content()
    settle(page)
    assert page.evaluate(PEAK) == answer_for({})["step"]["peak"]
    assert recorder.errors == []


def _load(page, kind: str, index: int = 0) -> int:
    row = page.locator(f"[data-{kind}-row]").nth(index)
    peak = int(row.get_attribute("data-peak"))
    page.evaluate(WATCH)
    row.locator(f"[data-{kind}-use]").click()
    assert page.evaluate(AWAIT_DRAWN) == "live"
    return peak


@pytest.mark.parametrize("order", [("plan", "fit"), ("fit", "plan")])
def test_a_load_sets_every_field_its_row_depends_on(open_page, order):
    """Item 3: planner Load then fit Load (and the reverse) each give the row's peak, with no error shown. A
    fine-tuning loaded is refused by the planner (as by `--plan`): no layout is offered over it until the reader
    trains every parameter again."""
    page, recorder = open_page()
    page.wait_for_selector("[data-fit-use]:not([disabled])")
    for kind in order:
        if kind == "plan" and page.input_value('[name="finetune"]') != "full":
            page.wait_for_selector("[data-planner][data-plan-state=ready] [data-plan-none]", timeout=60_000)
            assert page.locator("[data-plan-use]").count() == 0
            change(page, "finetune", "full")
            page.wait_for_selector("[data-planner][data-plan-state=ready] [data-plan-use]:not([disabled])")
        peak = _load(page, kind)
        assert page.evaluate(PEAK) == peak
        assert page.get_attribute("[data-calc]", "data-stale") is None
        assert all(not t.strip() for t in page.locator("[data-error-for]").all_text_contents())
    assert recorder.errors == []


def test_the_decoder_reads_its_bytes(open_page):
    """Item 5: the course's Decoder reads in kB, not 0.0 GB: its events in kB, its bars and its step drawn to
    their own scale with the 80 GB device named off the scale; a 0.001 GB device is a 1 MB one."""
    page, recorder = open_page("?preset=decoder&seq=8&micro-batch=16")
    settle(page)
    answer = answer_for({"preset": "decoder", "seq": "8", "micro-batch": "16"})
    assert page.evaluate(PEAK) == answer["step"]["peak"] < 10**6
    assert page.text_content("[data-out=peak]") == answer["peak_display"]["text"]  # calc's own string
    assert " kB" in page.text_content('[data-anim="label"]')
    bar = page.evaluate("""() => [...document.querySelectorAll('[data-chart=breakdown] .calc-bar rect')]
        .reduce((h, r) => h + Number(r.getAttribute('height')), 0)""")
    assert bar > 100  # four bars a good part of the plot's height, not a hairline under an 80 GB line
    assert page.locator("[data-chart=breakdown] .calc-capacity[data-off-scale]").count() == 1
    change(page, "capacity-gb", "0.001")
    assert "one 1 MB device" in page.text_content("[data-calc-summary]")
    assert recorder.errors == []


def test_messages_name_the_forms_labels_and_a_configs_own_value_is_refused_under_its_box(open_page):
    """Item 7: a fine-tuning beside a pipeline names “Pipeline stages”, not --pp, and the step's refusal of sequence
    parallelism at one rank names “Tensor parallel” and the planner, not --tp and --plan; a config.json too large
    to count is refused under the config box, not under Layers (which shows the previous model's value)."""
    page, recorder = open_page()
    change(page, "pp", "2")
    page.select_option('[name="finetune"]', "lora")  # refused: no redraw comes
    page.wait_for_function("() => document.querySelector('[data-error-for=\"finetune\"]')?.textContent.trim()")
    said = page.text_content('[data-error-for="finetune"]')
    assert said.startswith("Trains: ") and "“Pipeline stages”" in said and "--" not in said
    huge = json.loads(LLAMA2) | {"num_hidden_layers": 9000, "hidden_size": 65536, "intermediate_size": 1 << 20,
                                  "num_attention_heads": 64, "num_key_value_heads": 64}
    change(page, "finetune", "full")
    change(page, "pp", "1")
    page.check('[name="sequence-parallel"]')  # at one tensor-parallel rank the step refuses it
    page.wait_for_function("() => document.querySelector('[data-error-for=\"sequence-parallel\"]')?.textContent.trim()")
    reason = page.text_content('[data-error-for="sequence-parallel"]')  # calc's reason, in the form's words
    assert "“Tensor parallel”" in reason and "the planner" in reason and "--" not in reason
    page.uncheck('[name="sequence-parallel"]')
    paste(page, json.dumps(huge))
    error = page.locator('[data-error-for="hf-config"]')
    error.wait_for(state="visible")
    assert "too large" in error.text_content()
    assert page.text_content('[data-error-for="layers"]').strip() == ""
    assert recorder.errors == []


def test_a_field_with_no_control_here_is_named_as_a_links_setting_not_as_a_flag(open_page):
    """calc's message for heads that do not divide the width suggests --head-size, a field the form has no
    control for: the page names it as the setting a link gives (?head-size=), never as a CLI flag, and the CLI
    still names its flag."""
    from conftest import cli_run

    done = cli_run(["--heads", "7"])
    assert done.returncode == 2 and "--head-size" in done.stderr
    page, recorder = open_page()
    page.fill('[data-calc-form] [name="heads"]', "7")  # refused: no redraw comes
    page.wait_for_function("() => document.querySelector('[data-error-for=\"heads\"]')?.textContent.trim()")
    said = page.text_content('[data-error-for="heads"]')
    assert said.startswith("Heads (a): ") and "“head-size”" in said and "?head-size=" in said
    assert "--" not in said
    change(page, "heads", "32")  # the rest of the page goes on
    assert page.text_content('[data-error-for="heads"]').strip() == ""
    assert recorder.errors == []


def test_a_lora_rank_without_lora_is_refused_as_the_cli_refuses_it(open_page):
    """Item 8: `?lora-rank=64` with full training is named in the link's notice, as `--lora-rank 64` is refused."""
    page, recorder = open_page("?lora-rank=64")
    page.wait_for_selector("[data-calc-notice]:not([hidden]) [data-link-problem=lora-rank]")
    item = page.text_content("[data-link-problem=lora-rank]")
    assert item.startswith("LoRA rank (r):") and "applies to" in item and "“Trains”" in item
    settle(page)
    assert page.evaluate(PEAK) == answer_for({})["step"]["peak"]
    assert recorder.errors == []


def test_a_typed_sequence_is_kept_for_another_model_or_its_reset_is_said(open_page):
    """Item 9: a typed 2,048 stays when Mistral is chosen; for GPT-2 (context 1,024) it goes back to the model's
    own and the field's hint says why; Clear, back to the presets, keeps it too."""
    page, recorder = open_page()
    change(page, "seq", "2048")
    change(page, "preset", "mistral-7b")
    assert page.input_value('[name="seq"]') == "2048"
    assert page.evaluate(PEAK) == answer_for({"preset": "mistral-7b", "seq": "2048"})["step"]["peak"]
    change(page, "preset", "gpt2")
    settle(page)
    assert page.input_value('[name="seq"]') == "1024"
    assert "Reset to the new model's own sequence" in page.text_content('[data-hint-for="seq"]')
    change(page, "seq", "512")
    paste(page, LLAMA2)
    settle(page)
    page.click("[data-hf-clear]")
    settle(page)
    assert page.input_value('[name="seq"]') == "512"
    assert recorder.errors == []


def test_on_a_slow_link_the_progress_shows_bytes_received(browser, base_url):
    """Item 15: at 1.5 Mbit/s with 150 ms of latency the loading line counts the megabytes as they arrive."""
    context = browser.new_context()
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    rate = 1.5e6 / 8  # bytes per second
    cdp.send("Network.emulateNetworkConditions",
             {"offline": False, "latency": 150, "downloadThroughput": rate, "uploadThroughput": rate})
    page.goto(base_url)
    label = "document.querySelector('[data-progress-label]').textContent"
    page.wait_for_function(f"() => /MB received/.test({label})", timeout=45_000)
    first = page.text_content("[data-progress-label]")
    page.wait_for_function(f"t => {label} !== t", arg=first, timeout=20_000)  # and it moves on
    context.close()


def test_the_planner_and_the_fit_list_share_the_calculators_runtime(open_page):
    """Issue 21: planning, loading a layout and loading a fine-tuning start no second worker and fetch the
    WebAssembly once (the fixture checks this for every page)."""
    page, recorder = open_page("?global-batch=512")
    page.wait_for_selector("[data-planner][data-plan-source=live]", timeout=90_000)
    _load(page, "plan", 1)
    change(page, "global-batch", "256")
    page.wait_for_selector("[data-planner][data-plan-state=ready][data-plan-source=live]", timeout=60_000)
    _load(page, "fit", 0)
    assert recorder.runtimes() == 1


# A worker whose Python has failed for good: every question gets Pyodide's fatal answer.
FATAL_WORKER = """postMessage({type: "ready"});
onmessage = ({data}) => postMessage({id: data.id, fatal: true,
  error: "Pyodide already fatally failed and can no longer be used."});"""


def test_a_fatal_python_error_restarts_the_worker_and_says_so(open_page):
    """Item 2: after a fatal error the page starts a new worker (a new runtime) and its status says so."""
    route = ("**/calc-worker.mjs*", lambda r: r.fulfill(status=200, content_type="text/javascript", body=FATAL_WORKER))
    page, recorder = open_page(wait_live=False, route=route, runtimes=5)
    page.wait_for_function("() => Number(document.querySelector('[data-calc]').dataset.restarts) >= 1")
    page.wait_for_selector("[data-calc][data-state=ready]")
    assert "started again" in page.text_content("[data-calc-status]")
    for _ in range(100):  # the new worker's event can reach the recorder a moment after the status changes
        if sum(url.endswith("/calc-worker.mjs") for url in recorder.workers) >= 2:
            break
        page.wait_for_timeout(100)
    assert sum(url.endswith("/calc-worker.mjs") for url in recorder.workers) >= 2
    assert "fatally failed" in page.text_content("[data-calc-notice]")
    assert recorder.errors == []


@pytest.mark.parametrize(
    ("query", "flags"),
    [
        ("?walk=eager", ["--walk", "eager"]),
        ("?preset=mixtral-8x7b&experts=4", ["--preset", "mixtral-8x7b", "--experts", "4"]),
        ("?walk=eager&device=cpu&recipe=autocast&dp=4&zero=3",  # a rank of FSDP2 (calc.engines.fsdp)
         ["--walk", "eager", "--device", "cpu", "--recipe", "autocast", "--dp", "4", "--zero", "3"]),
    ],
)
def test_a_link_with_a_field_the_form_has_no_control_for_keeps_it(open_page, query, flags):
    """Every field calc knows (hooks/deck.page_fields) travels through a link, even one the form does not show:
    `?walk=eager` and `?experts=4` give the CLI's peak and stay in the address."""
    page, recorder = open_page(query)
    settle(page)
    assert page.evaluate(PEAK) == cli_json(flags)["peak"]
    name, value = flags[-2].lstrip("-"), flags[-1]
    assert query_of(page)[name] == [value]
    assert recorder.errors == []
