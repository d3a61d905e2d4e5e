"""The calculator as a fresh reviewer met it after the second pass (issue 20): a loop field the page cannot use
is dropped as the CLI refuses it, the address follows the form (a refused value included) and Back restores the
form, a refused paste is always named, and a card's memory reads as a card's."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import CATEGORIES, answer_for, built_site, rendered_table, settled_url
from test_site_second_pass import PEAK, paste, settle

import calc.cli

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change = calculator_tests.change


def query_of(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(settled_url(page)).query)


def test_a_links_loop_field_without_an_eager_figure_falls_back_and_is_named(open_page):
    """`?loop=trainer&recompute=selective` (a fresh reviewer's major): the deck's selective recomputation has no
    eager figure beside it, so the loop is refused as the CLI refuses `--loop trainer` there: the link's notice
    names Training loop, the field shows bare, the address drops it and the numbers are selective's."""
    page, recorder = open_page("?loop=trainer&recompute=selective")
    page.wait_for_selector("[data-calc-notice]:not([hidden]) [data-link-problem=loop]")
    item = page.text_content("[data-link-problem=loop]")
    assert item.startswith("Training loop (PyTorch): applies to the eager walk's figure beside the deck's"), item
    settle(page)
    assert page.input_value('[name="loop"]') == "bare" and "loop" not in query_of(page)
    assert query_of(page)["recompute"] == ["selective"]
    want = answer_for({"recompute": "selective"})
    assert page.evaluate(PEAK) == want["step"]["peak"] and not want["eager"]["available"]
    assert recorder.errors == []


def test_the_address_follows_a_refused_value_and_reopens_to_its_refusal(open_page):
    """Sequence 8,192 on GPT-2 (context 1,024; a fresh reviewer's minor): the address says seq=8192, not the last
    accepted value, so a link copied then is not silently another state; opened, its notice names Sequence."""
    page, recorder = open_page()
    change(page, "preset", "gpt2")
    seq = page.locator('[data-calc-form] [name="seq"]')
    seq.fill("")
    seq.press_sequentially("8192")  # 8, 81, 819 are accepted on the way
    page.wait_for_selector('[data-error-for="seq"]:not(:empty)')
    page.wait_for_function("() => new URLSearchParams(location.search).get('seq') === '8192'")
    assert query_of(page)["preset"] == ["gpt2"]
    again, recorder2 = open_page(f"?{urlparse(settled_url(page)).query}")
    again.wait_for_selector("[data-calc-notice]:not([hidden]) [data-link-problem=seq]")
    assert again.text_content("[data-link-problem=seq]").startswith("Sequence (s):")
    settle(again)
    assert again.evaluate(PEAK) == answer_for({"preset": "gpt2"})["step"]["peak"]
    assert recorder.errors == [] and recorder2.errors == []


def test_back_and_forward_restore_the_form_a_choice_made(open_page):
    """A preset chosen is a history entry, typing replaces it (a fresh reviewer's minor: Back left the page):
    Back gives the defaults back, fields and numbers; Forward the preset with the sequence typed on it."""
    page, recorder = open_page()
    default = page.evaluate(PEAK)
    change(page, "preset", "mistral-7b")
    change(page, "seq", "2048")
    assert query_of(page) == {"preset": ["mistral-7b"], "seq": ["2048"]}
    want = answer_for({"preset": "mistral-7b", "seq": "2048"})["step"]["peak"]
    page.go_back()
    page.wait_for_function("() => document.querySelector('[name=preset]').value === 'llama-7b'")
    settle(page)
    assert urlparse(settled_url(page)).query == "" and page.input_value('[name="seq"]') == "4096"
    assert page.evaluate(PEAK) == default
    page.go_forward()
    page.wait_for_function("() => document.querySelector('[name=preset]').value === 'mistral-7b'")
    settle(page)
    assert page.input_value('[name="seq"]') == "2048" and page.evaluate(PEAK) == want
    assert page.locator("[data-calc-notice]").is_hidden()
    assert recorder.errors == []


def test_a_config_refused_before_the_first_answer_stays_named(open_page):
    """A broken config.json pasted while the live calculator starts (a fresh reviewer's minor: within 0.5 s of
    the first answer it went unnamed, 4 of 4 tries): the first answer leaves the box's refusal on show."""
    page, recorder = open_page(wait_live=False)
    page.wait_for_selector("[data-calc][data-mounted]")
    paste(page, '{"model_type": "llama",')
    error = page.locator('[data-error-for="hf-config"]')
    error.wait_for(state="visible")
    page.wait_for_selector("[data-calc][data-state=ready]", timeout=90_000)
    page.wait_for_timeout(500)
    assert "not JSON" in error.text_content()
    assert recorder.errors == []


def test_a_cards_memory_reads_as_a_whole_number_of_gb():
    """The home and Beyond pages say "80 GB" of the default device, not "80.0 GB" (a fresh reviewer's minor)."""
    for page in ("index.html", "beyond/index.html"):
        text = (built_site() / page).read_text()
        assert "80.0 GB" not in text and "80 GB of the calculator" in text.replace("\n", " "), page


def test_the_step_chart_draws_whole_pixels_and_every_band_that_holds_bytes(open_page):
    """qwen3-30b-a3b at 1280 px (a fresh reviewer's minor: a jagged edge): the step chart's bands run on whole
    pixels with crisp edges, and the 16-bit logits (half a pixel beside 586 GB) are a band of at least one
    pixel at every event that holds them, not a broken fringe."""
    page, recorder = open_page("?preset=qwen3-30b-a3b")
    settle(page)
    paths = page.evaluate("""() => [...document.querySelectorAll('[data-chart=walk] path[data-category]')].map(
        p => [p.dataset.category, p.getAttribute('d'), p.getAttribute('shape-rendering')])""")
    assert {cat for cat, _, _ in paths} >= {"weights", "activations", "logits"}
    for cat, d, rendering in paths:
        numbers = d.replace("M", " ").replace("L", " ").replace("H", " ").replace(",", " ").replace("Z", " ").split()
        assert rendering == "crispEdges" and all(n.lstrip("-").isdigit() for n in numbers), cat
    events = answer_for({"preset": "qwen3-30b-a3b"})["step"]["events"]
    logits = dict((c, d) for c, d, _ in paths)["logits"]
    pairs = [tuple(map(int, pair.split(","))) for pair in re.findall(r"-?\d+,-?\d+", logits)]
    tops, bases = [y for _, y in pairs[: len(events)]], [y for _, y in reversed(pairs[len(events):])]
    held = [i for i, e in enumerate(events) if e["totals"]["logits"] > 0]
    assert held and all(bases[i] - tops[i] >= 1 for i in held)  # y grows downwards
    assert recorder.errors == []


DRAWN = """() => {
  const chart = document.querySelector('[data-chart=walk] svg'), root = chart;
  const ys = [...chart.querySelectorAll('path[data-category]')].flatMap(  // the tops 3 pixels wide or more
    p => [...p.getAttribute('d').matchAll(/[ML](-?\\d+),(-?\\d+)H(-?\\d+)/g)]
      .filter(m => m[3] - m[1] >= 3).map(m => +m[2]));
  const line = chart.querySelector('.calc-capacity line');
  return {top: Math.min(...ys), peakY: +root.dataset.peakY, drawn: +root.dataset.drawnEvents,
          events: +root.dataset.events, capacityY: line ? +line.getAttribute('y1') : null,
          markerEnd: +chart.querySelector('.calc-peak').getAttribute('y2')};
}"""


@pytest.mark.parametrize("width", [390, 768, 1280])
def test_the_step_chart_draws_its_peak_when_events_outnumber_pixels(open_page, width):
    """`?walk=eager&capacity-gb=128` (a fresh reviewer's major): 134.8 GB, "does not fit on one 128 GB device",
    but the chart's 6,638 events on a few hundred pixels drew its top near 120 GB, under the device's line. Drawn
    by pixel column, the largest running total of each column's events, the top of the bands is the stated
    peak (within the pixel a band that holds bytes is given at least), at least 3 pixels wide, above the device's
    line and not under the peak's marker, at 390, 768 and 1280 px."""
    page, recorder = open_page("?walk=eager&capacity-gb=128", viewport={"width": width, "height": 900})
    settle(page)
    got = page.evaluate(DRAWN)
    assert got["events"] > 2000 and got["drawn"] < got["events"], got  # more events than pixels
    assert got["peakY"] - len(CATEGORIES) <= got["top"] <= got["peakY"], got  # y grows downwards
    assert got["capacityY"] is not None and got["top"] < got["capacityY"], got
    assert got["markerEnd"] < got["top"], got
    assert recorder.errors == []


def test_a_refused_choice_is_an_entry_of_its_own_and_back_returns_to_the_last_accepted(open_page):
    """A fourth reviewer's minor: Trains = LoRA on Mixtral (refused: no fine-tuning of a mixture of experts)
    replaced the accepted entry before it, so Back skipped it. A choice from a list is an entry of its own:
    Back gives Mixtral back, accepted, its numbers and no error."""
    page, recorder = open_page()
    change(page, "preset", "mixtral-8x7b")
    want = page.evaluate(PEAK)
    page.select_option('[data-calc-form] [name="finetune"]', "lora")
    page.locator('[data-error-for="finetune"]').wait_for(state="visible")
    assert query_of(page)["finetune"] == ["lora"]
    page.go_back()
    page.wait_for_function("() => document.querySelector('[name=finetune]').value === 'full'")
    settle(page)
    assert query_of(page) == {"preset": ["mixtral-8x7b"]} and page.evaluate(PEAK) == want
    assert page.locator('[data-error-for="finetune"]').is_hidden()
    assert recorder.errors == []


def test_the_eager_walks_table_bars_and_sweep_keep_the_attention_chosen(open_page, capsys):
    """Issue 33's third major: under the eager walk the recipes' table, its bars and the sequence chart are the
    deck's accounting with the attention the form shows, the CLI's --attention sdpa --table (they drew eager
    attention's s x s scores whatever the field said); choosing eager attention brings the scores back."""
    import json

    def cli_table(attention: str) -> dict[str, int]:
        assert calc.cli.main(["--attention", attention, "--table", "--json"]) == 0
        return {row["id"]: row["peak"] for row in json.loads(capsys.readouterr().out)}

    page, recorder = open_page("?attention=sdpa&walk=eager")
    sdpa = answer_for({"attention": "sdpa"})  # the deck walk's answer with the same attention
    bars = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('[data-chart=breakdown] g')]
                              .filter(g => g.dataset.recipe).map(g => [g.dataset.recipe, Number(g.dataset.peak)]))""")
    assert {rid: row["peak"] for rid, row in rendered_table(page).items()} == bars == cli_table("sdpa")
    assert bars != cli_table("eager")
    lines = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('[data-chart=sweep] polyline')]
                               .filter(l => l.dataset.recipe).map(l => [l.dataset.recipe, Number(l.dataset.last)]))""")
    assert lines == {rid: peaks[-1] for rid, peaks in sdpa["sweep"]["peaks"].items()}
    calculator_tests.change(page, "attention", "eager")
    assert {rid: row["peak"] for rid, row in rendered_table(page).items()} == cli_table("eager")
    assert recorder.errors == []


@pytest.mark.parametrize("query, loop", [
    ("?preset=llama-3.2-1b&recipe=fp32-full&loop=trainer&device=cpu&attention=sdpa&walk=eager", "trainer"),
    ("?preset=llama-3.2-1b&recipe=fp32-full&loop=trainer&device=cpu&attention=sdpa&walk=eager"
     "&loss=torchtune-chunked", "trainer"),
    ("?preset=llama-3.2-1b&recipe=autocast&loop=sft&finetune=lora&device=cpu&walk=eager", "sft"),
])  # fmt: skip
def test_a_loop_measured_in_the_results_is_quoted_with_its_band(open_page, base_url, query, loop):
    """Issue 33's second major: a step run as Trainer (any loss) or as TRL's SFTTrainer with LoRA, settings
    results §13.2 measured, is quoted with the band of those steps and linked to §13.2, where the page said no
    measured step ran it (its bands knew only the bare loop)."""
    from hooks import deck

    page, recorder = open_page(query)
    eager = page.evaluate("() => document.querySelector('[data-calc-eager]').textContent")
    said = answer_for({k: v[0] for k, v in parse_qs(query[1:]).items()})["eager"]
    assert said["setting"].split()[2] == loop
    band = deck.band_for(deck.eager_bands(), said["band"], said["setting"])
    shown = calculator_tests.eager_shown(page)
    assert "No measured step" not in eager and band["section"] == "13.2"
    assert (shown["low"], shown["high"]) == (band["low"], band["high"])
    assert shown["href"] == base_url + "results/#sec-13-2"
    assert recorder.errors == []


def test_the_walk_is_a_field_and_messages_naming_it_read_as_the_page_and_the_cli_say_them(open_page):
    """Issue 33: the walk is chosen on the form ("Walk": the deck's accounting, or what PyTorch allocates), and
    a message naming a flag reads as a field's label, or as the command itself where it says what to type in
    the CLI: ?walk=eager&layers=300 no longer says "run the CLI's “walk” (no field here shows it...", and
    ?flash=true&attention=eager no longer says "“flash” (...) is “Attention” sdpa, --no-flash is ..."."""
    page, recorder = open_page("?walk=eager&layers=300")
    settle(page)
    assert page.input_value('[data-calc-form] [name="walk"]') == "eager"
    said = page.text_content("[data-link-problem=layers]")  # the link's 300 layers dropped, and why
    assert "choose the deck's accounting under “Walk”, or run the CLI's --walk eager" in said, said
    assert "no field here" not in said
    change(page, "walk", "deck")  # the deck's accounting, then the link's 300 layers typed: answered
    change(page, "layers", "300")
    assert page.text_content('[data-error-for="layers"]').strip() == ""
    assert page.get_attribute('[data-out="peak"]', "data-bytes") == str(
        answer_for({"layers": "300"})["step"]["peak"])
    flash, _ = open_page("?flash=true&attention=eager", wait_live=False)
    flash.wait_for_selector("[data-link-problem]")
    text = flash.text_content("[data-calc-notice]")
    assert ("says the opposite of “Attention” eager: flash is the same as “Attention” sdpa, no flash as "
            "“Attention” eager; give one of the two") in text, text
    assert "--" not in text and text.count("no field here") <= 1
    assert recorder.errors == []


@pytest.mark.parametrize("query", ["?optimizer=lion", "?finetune=lora"])
def test_the_sequence_charts_own_line_names_the_readers_step_not_a_fine_tuning(open_page, query):
    """Issue 33's minor: the sequence chart's extra line (the sweep's "finetune" row, the reader's own step)
    read "your fine-tuning step" where only the optimizer changed; it names the reader's step either way."""
    page, recorder = open_page(query)
    settle(page)
    page.wait_for_selector("[data-chart=sweep] polyline[data-recipe=finetune]")
    legend = page.eval_on_selector_all("[data-chart=sweep] .calc-legend li", "lis => lis.map(li => li.textContent)")
    assert legend[-1] == "your step (its training and optimizer)" and not any("fine-tuning" in t for t in legend)
    assert recorder.errors == []


def test_the_embedding_switch_trains_it_under_frozen_blocks_as_the_cli_does(open_page):
    """Issue 34: Trains "freeze" shows "Embedding frozen too"; unchecked under the eager walk the step trains
    the embedding through the frozen blocks, the CLI's --no-freeze-embedding peak; under the deck walk, whose
    frozen blocks keep nothing, the switch is refused inline, the rest of the page answering."""
    from conftest import cli_json

    settings = {"preset": "llama-3.2-1b", "seq": "512", "recipe": "autocast", "device": "cpu", "walk": "eager",
                "finetune": "freeze", "freeze-layers": "2"}  # fmt: skip
    page, recorder = open_page("?" + "&".join(f"{k}={v}" for k, v in settings.items()))
    settle(page)
    switch = page.locator('[data-calc-form] [name="freeze-embedding"]')
    assert switch.is_visible() and switch.is_checked()
    flags = [a for k, v in settings.items() for a in (f"--{k}", v)]
    frozen = page.evaluate(PEAK)
    assert frozen == cli_json(flags)["peak"]
    change(page, "freeze-embedding", False)
    trained = cli_json([*flags, "--no-freeze-embedding"])
    assert page.evaluate(PEAK) == trained["peak"] > frozen
    assert page.get_attribute('[data-out="trainable"]', "data-count") == str(trained["trainable_params"])
    assert query_of(page)["freeze-embedding"] == ["false"]
    page.select_option('[data-calc-form] [name="walk"]', "deck")  # refused: no redraw, the message inline
    page.wait_for_function("() => document.querySelector('[data-error-for=\"freeze-embedding\"]')?.textContent.trim()")
    assert "trains the embedding below frozen blocks" in page.text_content('[data-error-for="freeze-embedding"]')
    assert recorder.errors == []


def test_the_head_switch_freezes_the_final_norm_and_head_as_the_cli_does(open_page):
    """Issue 32: Trains "freeze" shows "Head and final norm frozen too" (LLaMA-Factory's freeze), unchecked by
    default; checked, the page's peak and trainable count are the CLI's --freeze-head ones, in both walks, and
    the address keeps it."""
    from conftest import cli_json

    settings = {"preset": "llama-7b", "seq": "256", "finetune": "freeze", "freeze-layers": "30"}
    page, recorder = open_page("?" + "&".join(f"{k}={v}" for k, v in settings.items()))
    settle(page)
    switch = page.locator('[data-calc-form] [name="freeze-head"]')
    assert switch.is_visible() and not switch.is_checked()
    flags = [a for k, v in settings.items() for a in (f"--{k}", v)]
    assert page.evaluate(PEAK) == cli_json(flags)["peak"]
    change(page, "freeze-head", True)
    frozen = cli_json([*flags, "--freeze-head"])
    assert page.evaluate(PEAK) == frozen["peak"] < cli_json(flags)["peak"]
    assert page.get_attribute('[data-out="trainable"]', "data-count") == str(frozen["trainable_params"])
    assert query_of(page)["freeze-head"] == ["true"]
    page.select_option('[data-calc-form] [name="walk"]', "eager")
    settle(page)
    assert page.evaluate(PEAK) == cli_json([*flags, "--freeze-head", "--walk", "eager"])["peak"]
    assert recorder.errors == []


def test_the_arrow_keys_through_a_list_make_one_history_entry(open_page):
    """Issue 33's minor: the arrow keys through the preset list chose at every step, one history entry a preset
    passed. The first step is the entry and the later ones are typing, written into it: the address ends on the
    preset the keys stopped at, and one Back returns to the preset before the run."""
    page, recorder = open_page()
    entries = page.evaluate("history.length")
    page.focus('[data-calc-form] [name="preset"]')
    for _ in range(3):
        page.keyboard.press("ArrowDown")
    settle(page)
    chosen = page.input_value('[data-calc-form] [name="preset"]')
    assert chosen != "llama-7b" and query_of(page)["preset"] == [chosen]
    assert page.evaluate("history.length") == entries + 1
    assert page.evaluate(PEAK) == answer_for({"preset": chosen})["step"]["peak"]
    page.go_back()
    page.wait_for_function("() => document.querySelector('[name=preset]').value === 'llama-7b'")
    settle(page)
    assert urlparse(settled_url(page)).query == ""
    assert recorder.errors == []


@pytest.mark.parametrize("width", [390, 1280])
def test_a_table_wider_than_its_box_says_it_scrolls(open_page, width):
    """Issue 33's minor: at 390 px the planner's and the fit list's tables were cut at Recomputation with no sign
    of the rest. Narrow, each says in words that it scrolls sideways and its box draws a shadow on the side that
    scrolls; wide, where the table fits, the words are not shown."""
    page, recorder = open_page(viewport={"width": width, "height": 900})
    for box in ("[data-planner]", "[data-fit]"):
        hint = page.locator(f"{box} .calc-scroll-hint")
        scroll = page.locator(f"{box} .calc-plan-scroll")
        wider = scroll.evaluate("e => e.scrollWidth > e.clientWidth")
        assert hint.is_visible() == (width == 390) == wider, box
        assert "radial-gradient" in scroll.evaluate("e => getComputedStyle(e).backgroundImage")
    assert recorder.errors == []


def test_a_pause_ends_a_keyboard_run_and_a_loop_preset_run_is_one_entry(open_page):
    """A keyboard run through a list ends when the reader pauses (a second run after a pause is an entry of its
    own: Back returns to where the first stopped), and the arrow keys through "Run as" make one entry, not one
    for each field a preset sets at each step."""
    page, recorder = open_page()
    entries = page.evaluate("history.length")
    page.focus('[data-calc-form] [name="preset"]')
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    settle(page)
    first = page.input_value('[data-calc-form] [name="preset"]')
    page.wait_for_timeout(1500)  # a reader's pause, past the run's second
    page.keyboard.press("ArrowDown")
    settle(page)
    assert page.evaluate("history.length") == entries + 2
    page.focus("[data-loop-preset]")
    for _ in range(2):
        page.keyboard.press("ArrowDown")
    settle(page)
    assert page.evaluate("history.length") == entries + 3
    page.go_back()
    page.go_back()
    page.wait_for_function(f"() => document.querySelector('[name=preset]').value === '{first}'")
    assert recorder.errors == []


def test_offload_is_a_field_and_the_host_figure_reads_as_the_cli_says_it(open_page, capsys):
    """--offload (issue 32) on the form: from the address and from the select, the summary gives the device's peak
    and the host's figure, each the CLI's for the same flags; a stage-less offload is refused inline, naming the
    field, and the rest of the page keeps its last answer."""
    page, recorder = open_page("?zero=2&offload=optimizer&recompute=full")
    settle(page)
    want = answer_for({"zero": "2", "offload": "optimizer", "recompute": "full"})
    assert page.evaluate(PEAK) == want["step"]["peak"]
    assert page.text_content("[data-out=host]") == f" Offloaded, {want['host_text']}."
    assert calc.cli.main(["--zero", "2", "--offload", "optimizer", "--recompute", "full"]) == 0
    assert f"  host: {want['host_text']}" in capsys.readouterr().out.splitlines()
    for name, value in (("dp", "8"), ("zero", "3"), ("offload", "optimizer+params")):
        change(page, name, value)
    want = answer_for({"dp": "8", "zero": "3", "offload": "optimizer+params", "recompute": "full"})
    assert page.evaluate(PEAK) == want["step"]["peak"]
    assert page.text_content("[data-out=host]") == f" Offloaded, {want['host_text']}."
    assert query_of(page)["offload"] == ["optimizer+params"]
    saved = []
    page.on("download", lambda download: saved.append(download))
    page.click('[data-export="table"]')  # the CLI refuses --table beside --offload: no file, said why
    page.wait_for_selector("[data-copy-said]:has-text('No file: the table as CSV')")
    assert calc.cli.main(["--zero", "3", "--dp", "8", "--offload", "optimizer+params", "--table"]) == 2
    assert "--offload" in capsys.readouterr().err
    with page.expect_download():  # the step's JSON has the host figure: saved
        page.click('[data-export="step"]')
    assert saved and saved[0].suggested_filename.endswith("-step.json")
    page.locator('[data-calc-form] [name="zero"]').select_option("0")
    page.wait_for_selector('[data-error-for="offload"]:not(:empty)')
    assert "give --zero 1, 2 or 3" not in page.text_content('[data-error-for="offload"]')  # the page's words
    assert "ZeRO stage" in page.text_content('[data-error-for="offload"]')
    assert page.evaluate(PEAK) == want["step"]["peak"] and recorder.errors == []
