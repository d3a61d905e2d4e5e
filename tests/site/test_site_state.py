"""The calculator's state across choices: a Load of "What fits on one card" sets only the fields its row trains
with, and a setting the link carries with no field on the page never outlives the choice it applies to (calc
refuses it: it is dropped from what is sent and from the address, in one line naming it); a link refused on one
setting loses that setting only."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import test_site_calculator as calculator_tests
from site_fixtures import AWAIT_DRAWN, settled_url
from test_site_second_pass import PEAK, WATCH, settle

from conftest import cli_json

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change = calculator_tests.change
FIT_LIVE = "() => document.querySelector('[data-fit-status]').textContent.includes('in your browser')"
DEFAULTS = "() => JSON.parse(document.querySelector('[data-calc-config]').textContent).defaults"
ERRORS = "() => [...document.querySelectorAll('[data-error-for]')].map(e => e.textContent.trim()).filter(Boolean)"


def query_of(page) -> dict[str, list[str]]:
    return parse_qs(urlparse(settled_url(page)).query)


def load_full_row(page) -> dict[str, str]:
    """Press Load on the live fit list's first row that trains every parameter; its recompute and micro-batch."""
    page.wait_for_function(FIT_LIVE)
    page.wait_for_selector("[data-fit-use]:not([disabled])")
    row = page.locator("tr[data-fit-row][data-finetune=full]").first
    picked = {"recompute": row.get_attribute("data-recompute"), "micro-batch": row.get_attribute("data-micro-batch")}
    page.evaluate(WATCH)
    row.locator("[data-fit-use]").click()
    assert page.evaluate(AWAIT_DRAWN) == "live"
    return picked


def assert_fine(page) -> None:
    """No refusal on show: no error beside a field, no input notice, the numbers not dimmed."""
    assert page.evaluate(ERRORS) == []
    assert "could not use these inputs" not in (page.text_content("[data-calc-notice]") or "")
    assert page.get_attribute("[data-calc]", "data-stale") is None


def test_a_full_row_loaded_leaves_the_lora_fields_at_their_defaults(open_page):
    """A full row carries rank 0 and no targets: after its Load, LoRA chosen again starts from LoRA's default
    rank and targets (not "must be at least 1, got 0"), and the peak is the CLI's for that LoRA."""
    page, recorder = open_page("?recipe=bf16&optimizer=lion&finetune=lora")
    picked = load_full_row(page)
    assert page.input_value('[name="finetune"]') == "full"
    change(page, "finetune", "lora")
    defaults = page.evaluate(DEFAULTS)
    assert page.input_value('[name="lora-rank"]') == defaults["lora-rank"] != "0"
    assert page.input_value('[name="lora-targets"]') == defaults["lora-targets"]
    assert_fine(page)
    flags = ["--recipe", "bf16", "--optimizer", "lion", "--finetune", "lora", "--recompute", picked["recompute"],
             "--micro-batch", picked["micro-batch"]]  # fmt: skip
    assert page.evaluate(PEAK) == cli_json(flags)["peak"]
    assert recorder.errors == []


def test_a_link_only_setting_is_dropped_once_trains_no_longer_takes_it(open_page):
    """`?finetune=lora&lora-alpha=32` (alpha has no field here), then Trains full: calc refuses lora-alpha, so it
    is dropped from the inputs and the address with one line naming it, and the page answers full training;
    LoRA again answers with its default alpha."""
    page, recorder = open_page("?finetune=lora&lora-alpha=32")
    settle(page)
    assert query_of(page)["lora-alpha"] == ["32"]
    assert page.evaluate(PEAK) == cli_json(["--finetune", "lora", "--lora-alpha", "32"])["peak"]
    change(page, "finetune", "full")
    line = page.text_content("[data-calc-notice]:not([hidden]) [data-link-problem=lora-alpha]")
    assert "lora-alpha" in line and "no longer applies and was dropped" in line
    assert "lora-alpha" not in query_of(page)
    assert page.evaluate(PEAK) == cli_json([])["peak"]
    assert_fine(page)
    change(page, "finetune", "lora")
    assert "lora-alpha" not in query_of(page) and query_of(page)["finetune"] == ["lora"]
    assert page.evaluate(PEAK) == cli_json(["--finetune", "lora"])["peak"]
    assert_fine(page)
    assert recorder.errors == []


def test_a_full_row_loaded_over_a_links_alpha_answers_full_training(open_page):
    """A QLoRA link with alpha, paged optimizer state and flash; a full row's Load: alpha is dropped (named in
    one line), the other settings stay, and the numbers are the CLI's for the full row, not QLoRA's."""
    page, recorder = open_page("?finetune=qlora&paged-optimizer=true&lora-alpha=32&flash=true")
    settle(page)
    picked = load_full_row(page)
    line = page.text_content("[data-calc-notice]:not([hidden]) [data-link-problem=lora-alpha]")
    assert "lora-alpha" in line and "dropped" in line
    query = query_of(page)
    assert "lora-alpha" not in query and "finetune" not in query  # full is the default
    assert query["flash"] == ["true"] and query["paged-optimizer"] == ["true"]
    flags = ["--paged-optimizer", "--flash", "--recompute", picked["recompute"], "--micro-batch", picked["micro-batch"]]
    assert page.evaluate(PEAK) == cli_json(flags)["peak"]
    assert_fine(page)
    assert recorder.errors == []


def test_a_link_refused_on_one_setting_keeps_the_others(open_page):
    """`?walk=eager&experts=8`: calc names experts-per-token (`--experts` in its message); the link's experts
    is dropped and said so, walk=eager stays in the page's inputs and its address."""
    page, recorder = open_page("?walk=eager&experts=8")
    line = page.text_content("[data-calc-notice]:not([hidden]) [data-link-problem=experts-per-token]")
    assert "experts" in line and "dropped" in line
    settle(page)
    query = query_of(page)
    assert query["walk"] == ["eager"] and "experts" not in query
    eager = "() => Number(document.querySelector('[data-out=\"eager-peak\"]').dataset.bytes)"
    assert page.evaluate(eager) == cli_json(["--walk", "eager"])["peak"]
    assert recorder.errors == []


def test_a_sequence_not_typed_follows_learned_positions_as_the_clis_default_does(open_page):
    """Positions set to learned (a context of 2,048 on llama-7b's shape), by the form or by a link without seq:
    the sequence the reader never typed becomes the model's own (at most the context), as the CLI's default
    does, with no refusal; a sequence the reader typed is kept and refused by name, as `--seq` is."""
    page, recorder = open_page()
    change(page, "positions", "learned")
    settle(page)
    assert_fine(page)
    want = cli_json(["--positions", "learned"])
    assert page.input_value('[name="seq"]') == str(want["config"]["seq"]) == "2048"
    assert page.evaluate(PEAK) == want["peak"]
    link = "?tied=true&bias=true&norm=layer&positions=learned&gated-ffn=false"
    page, _ = open_page(link)
    settle(page)
    assert_fine(page)
    flags = ["--tied", "--bias", "--norm", "layer", "--positions", "learned", "--no-gated-ffn"]
    assert page.evaluate(PEAK) == cli_json(flags)["peak"]
    page.fill('[data-calc-form] [name="seq"]', "4096")
    refused = ERRORS.replace("filter(Boolean)", "filter(Boolean).join(' ').includes('at most the context')")
    page.wait_for_function(refused)
    assert recorder.errors == []


def test_a_links_fine_tuning_refused_takes_its_own_fields_along(open_page):
    """`?preset=mixtral-8x7b&finetune=lora&lora-rank=64`: calc refuses LoRA on a mixture of experts (as the CLI's
    --finetune lora does); Trains falls back to full and the link's rank goes with it, named in the same line,
    and LoRA's fields are hidden again (no value on show that the step does not use); the numbers are the CLI's
    full training of the preset and the address says no more than that."""
    page, recorder = open_page("?preset=mixtral-8x7b&finetune=lora&lora-rank=64")
    settle(page)
    line = page.text_content("[data-calc-notice]:not([hidden])")
    assert "the deck walk does not fine-tune a mixture of experts" in line
    assert "LoRA rank (r) dropped with it" in line
    assert page.input_value('[name="finetune"]') == "full"
    assert not page.locator('[data-calc-form] [name="lora-rank"]').is_visible()
    assert page.evaluate(PEAK) == cli_json(["--preset", "mixtral-8x7b"])["peak"]
    query = query_of(page)
    assert query == {"preset": ["mixtral-8x7b"]}
    assert recorder.errors == []
