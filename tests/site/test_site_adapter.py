"""The adapters' dtype on the page (issue 20, item 4): the field is calc's `--adapter-dtype`, shown with LoRA and
QLoRA, sent, kept by the link, and the peak it gives is the CLI's for the same flags."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import test_site_calculator as calculator_tests
from site_fixtures import settled_url
from test_site_second_pass import settle

from conftest import cli_json

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
PEAK = "() => Number(document.querySelector('[data-out=\"peak\"]').dataset.bytes)"


def test_the_adapters_dtype_changes_the_peak_as_the_cli_does(open_page):
    """bf16 LoRA: peft's fp32 adapters by default, then the model's dtype; each is the CLI's peak, and the
    link keeps the choice."""
    page, recorder = open_page()
    settle(page)
    assert not page.is_visible('[name="adapter-dtype"]')  # full fine-tuning has no adapters
    page.select_option('[name="recipe"]', "bf16")
    page.select_option('[name="finetune"]', "lora")
    settle(page)
    assert page.is_visible('[name="adapter-dtype"]') and page.input_value('[name="adapter-dtype"]') == "fp32"
    fp32 = page.evaluate(PEAK)
    assert fp32 == cli_json(["--recipe", "bf16", "--finetune", "lora"])["peak"]
    page.select_option('[name="adapter-dtype"]', "model")
    settle(page)
    model = page.evaluate(PEAK)
    assert model == cli_json(["--recipe", "bf16", "--finetune", "lora", "--adapter-dtype", "model"])["peak"]
    assert model < fp32  # bf16 adapters: no fp32 copies of their inputs, half the state
    assert parse_qs(urlparse(settled_url(page)).query)["adapter-dtype"] == ["model"]
    again, _ = open_page("?" + urlparse(settled_url(page)).query)
    settle(again)
    assert again.input_value('[name="adapter-dtype"]') == "model" and again.evaluate(PEAK) == model
    assert recorder.errors == []
