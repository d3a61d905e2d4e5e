"""The training loop around the eager walk's step on the page: the Training loop, AdamW implementation and
Loss fields are calc's (`--loop`, `--adamw-impl`, `--loss`), shown, sent, kept by the link, and the figure of
what PyTorch allocates beside the deck's peak is the CLI's `--walk eager` with the same flags."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import test_site_calculator as calculator_tests
from site_fixtures import settled_url
from test_site_second_pass import settle

from conftest import cli_json

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change = calculator_tests.change
EAGER = "() => Number(document.querySelector('[data-out=\"eager-peak\"]').dataset.bytes)"


def test_the_loop_fields_change_the_eager_figure_as_the_cli_does(open_page):
    """Trainer's loop, then the single-tensor AdamW, then TRL's SFTTrainer with LoRA: each redraws the eager
    walk's peak to the CLI's for the same flags, and the address keeps them."""
    page, recorder = open_page()
    settle(page)
    bare = page.evaluate(EAGER)
    assert bare == cli_json(["--walk", "eager"])["peak"]
    for name, value, flags in (
        ("loop", "trainer", ["--loop", "trainer"]),
        ("adamw-impl", "single", ["--loop", "trainer", "--adamw-impl", "single"]),
    ):
        page.select_option(f'[name="{name}"]', value)
        settle(page)
        assert page.evaluate(EAGER) == cli_json(["--walk", "eager", *flags])["peak"], flags
        assert parse_qs(urlparse(settled_url(page)).query)[name] == [value]
    assert page.evaluate(EAGER) != bare
    page.select_option('[name="adamw-impl"]', "")
    page.select_option('[name="loop"]', "sft")
    page.select_option('[name="finetune"]', "lora")
    settle(page)
    assert page.evaluate(EAGER) == cli_json(["--walk", "eager", "--loop", "sft", "--finetune", "lora"])["peak"]
    again, _ = open_page(urlparse(settled_url(page)).query and "?" + urlparse(settled_url(page)).query)
    settle(again)
    assert again.input_value('[name="loop"]') == "sft" and again.evaluate(EAGER) == page.evaluate(EAGER)
    assert recorder.errors == []


def test_a_loop_preset_sets_the_loops_fields(open_page):
    """"As TRL's SFTTrainer runs it" sets the loop, AdamW implementation, loss, precision and checkpointing to
    SFTTrainer's defaults (calc.loops.LOOP_PRESETS), and the eager figure is the CLI's for those flags; "as
    Trainer runs it" then sets Trainer's."""
    from calc.loops import LOOP_PRESETS

    page, recorder = open_page()
    settle(page)
    for preset in ("sft", "trainer"):
        page.select_option("[data-loop-preset]", preset)
        settle(page)
        fields = LOOP_PRESETS[preset]
        assert {name: page.input_value(f'[name="{name}"]') for name in fields} == fields
        flags = [a for name, value in fields.items() for a in (f"--{name}", value)]
        assert page.evaluate(EAGER) == cli_json(["--walk", "eager", *flags])["peak"], preset
    assert recorder.errors == []
