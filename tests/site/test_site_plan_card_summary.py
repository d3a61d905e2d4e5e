"""The calculator page against the CLI, third pass: the planner refuses what `--plan` refuses (another optimizer,
a fine-tuning, the eager walk) with calc's reason; a `card=` link is `--card`; the summary names the walk and
the optimizer it used, and no table row is marked as the step when its number is not the summary's."""

from __future__ import annotations

import subprocess
import sys

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import settled_url
from test_site_second_pass import PEAK, query_of, settle

from conftest import ROOT, cli_json

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
PLANNED = "[data-planner][data-plan-state=ready][data-plan-source=live]"


def cli_refusal(args: list[str]) -> str:
    """The CLI's one-line refusal of ARGS (exit 2), less its "error: --field: " start."""
    out = subprocess.run([sys.executable, "-m", "calc", *args], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.startswith("error: --"), out.stderr
    return out.stderr.strip().split(": ", 2)[2]


# The CLI's modes as the page names them (messages.js pageWords): the page's messages name no CLI flag.
PAGE_MODES = {"--table": "the table", "--plan": "the planner", "--fit-card": "“What fits on one card”"}


def page_words(message: str) -> str:
    """calc's message as the page says it: its modes by the page's names for them."""
    for flag, words in sorted(PAGE_MODES.items(), key=lambda item: -len(item[0])):
        message = message.replace(flag, words)
    return message


@pytest.mark.parametrize(
    ("query", "flags"),
    [
        ("?optimizer=sgd", ["--optimizer", "sgd"]),
        ("?finetune=qlora&optimizer=sgd", ["--finetune", "qlora", "--optimizer", "sgd"]),
        ("?recipe=bf16&optimizer=lion", ["--recipe", "bf16", "--optimizer", "lion"]),
        ("?walk=eager", ["--walk", "eager"]),
    ],
)
def test_the_planner_refuses_what_the_cli_plan_refuses(open_page, query, flags):
    """`--plan` refuses another optimizer, a fine-tuning and the eager walk: the planner shows no layout, only
    calc's reason, while the fit list still answers (but on the eager walk, whose peaks its rows are not:
    tests/test_site_links_and_fit.py)."""
    reason = page_words(cli_refusal([*flags, "--plan"]))
    assert "--" not in reason
    page, recorder = open_page(query)
    page.wait_for_selector(PLANNED, timeout=90_000)
    assert page.locator("[data-plan-row]").count() == 0
    status = page.text_content("[data-plan-status]")
    assert "layouts fit" not in status and reason in status and reason in page.text_content("[data-plan-body]")
    assert (page.locator("[data-fit-row]").count() > 0) == ("walk" not in query)
    assert recorder.errors == []


def test_a_fine_tuning_link_keeps_its_settings_through_the_planner(open_page):
    """`?preset=qwen2.5-7b&finetune=lora&lora-rank=32`: no planner row can be loaded over the reader's LoRA
    (the planner refuses it, as `--plan` does); the fields and the link keep rank 32."""
    page, recorder = open_page("?preset=qwen2.5-7b&finetune=lora&lora-rank=32")
    page.wait_for_selector(PLANNED, timeout=90_000)
    assert page.locator("[data-plan-use]").count() == 0
    assert page.input_value('[name="finetune"]') == "lora" and page.input_value('[name="lora-rank"]') == "32"
    assert query_of(page)["lora-rank"] == ["32"] and query_of(page)["finetune"] == ["lora"]
    want = cli_json(["--preset", "qwen2.5-7b", "--finetune", "lora", "--lora-rank", "32"])["peak"]
    assert page.evaluate(PEAK) == want
    assert recorder.errors == []


def test_a_card_link_is_the_clis_card(open_page):
    """`?card=h100-80gb` and `?card=rtx-4090&capacity-gb=&finetune=qlora` are `--card` (the capacity the planners
    and the summary use; the CLI's single step reads none): no notice, the capacity field shows the card's GB,
    the summary names it, and the address (reopened) gives the same."""
    page, recorder = open_page("?card=h100-80gb")
    settle(page)
    assert page.locator("[data-calc-notice]:not([hidden])").count() == 0
    assert page.input_value('[name="capacity-gb"]') == "80" and query_of(page)["card"] == ["h100-80gb"]
    assert page.evaluate(PEAK) == cli_json([])["peak"]  # a card sets the capacity; the step is the same
    page, _ = open_page("?card=rtx-4090&capacity-gb=&finetune=qlora")
    settle(page)
    for _ in range(2):
        assert page.locator("[data-calc-notice]:not([hidden])").count() == 0
        assert page.input_value('[name="capacity-gb"]') == "24"
        assert "one 24 GB device" in page.text_content("[data-calc-summary]")
        assert query_of(page)["card"] == ["rtx-4090"] and "capacity-gb" not in query_of(page)
        assert page.evaluate(PEAK) == cli_json(["--finetune", "qlora"])["peak"]
        page, _ = open_page("?" + settled_url(page).split("?", 1)[1].split("#")[0])  # the address it wrote, reopened
        settle(page)
    assert recorder.errors == []


def test_a_bad_card_gets_calcs_reason(open_page):
    """`?card=nope` is refused with `--card nope`'s reason (not "give a card or capacity-gb, not both")."""
    reason = cli_refusal(["--card", "nope"])
    page, recorder = open_page("?card=nope")
    page.wait_for_selector("[data-calc-notice]:not([hidden]) [data-link-problem=card]")
    said = page.text_content("[data-link-problem=card]")
    assert reason in said and "not both" not in said
    settle(page)
    assert page.input_value('[name="capacity-gb"]') == "80"
    assert recorder.errors == []


SELECTED = "() => [...document.querySelectorAll('tr[data-recipe].calc-row--selected')].map(tr => tr.dataset.recipe)"


@pytest.mark.parametrize(
    ("query", "said", "unsaid"),
    [
        ("?optimizer=sgd-momentum", "mixed-precision SGD with momentum", "Adam"),
        ("?preset=llama-3.2-1b&walk=eager", "as the eager walk allocates it", None),
        ("?optimizer=lion&recipe=autocast", "autocast bf16 over fp32 Lion", "Adam"),
    ],
)
def test_the_summary_names_its_walk_and_optimizer_and_no_row_claims_it(open_page, query, said, unsaid):
    """The summary says which walk and optimizer gave its peak; the four AdamW deck-walk rows (and their bars)
    mark none as "(selected)" when none has the summary's number, and the caption says why."""
    page, recorder = open_page(query)
    settle(page)
    summary = page.text_content("[data-calc-summary]")
    assert said in summary and (unsaid is None or unsaid not in summary)
    assert page.evaluate(SELECTED) == []
    assert "(selected)" not in page.text_content("[data-chart=breakdown]")
    assert "None of these rows is your step" in page.text_content('[data-out="caption"]')
    assert recorder.errors == []


def test_the_selected_row_is_the_summarys_step(open_page):
    """With the deck walk and AdamW the recipe's row is marked, and its peak is the summary's."""
    page, recorder = open_page("?recipe=fp32")
    settle(page)
    assert page.evaluate(SELECTED) == ["fp32-none"]
    row_peak = page.get_attribute('tr[data-recipe="fp32-none"] [data-part="peak"]', "data-bytes")
    assert int(row_peak) == page.evaluate(PEAK)
    assert "(selected)" in page.text_content("[data-chart=breakdown]")
    assert recorder.errors == []
