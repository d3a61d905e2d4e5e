"""The trainer config box in Debian's Chromium (issue 32): a shipped trainer config pasted, or chosen as files,
gives the page the numbers the CLI's --trainer-config gives for the same file, lists what each key gave as the
CLI does, and a refused file is named under the box with nothing on the page lost. The YAML is read by PyYAML
in the page too (hooks/wheel.py's wheel of the PyYAML the CLI uses)."""

from __future__ import annotations

import re

import pytest
import test_site_calculator as calculator_tests
from site_fixtures import AWAIT_DRAWN, settled_url

from conftest import ROOT, cli_json, cli_run

base_url, browser, open_page = calculator_tests.base_url, calculator_tests.browser, calculator_tests.open_page
change = calculator_tests.change

EXAMPLES = ROOT / "tests" / "trainer_configs"
WATCH_DRAWN = """() => { window.__drawn = new Promise(resolve => document.querySelector('[data-calc]')
    .addEventListener('calc:drawn', e => resolve(e.detail.source), {once: true})); }"""
# What the page holds after a reading: the step's peak, what the box lists, the command it shows
SHOWN = """() => ({
    peak: Number(document.querySelector('[data-out="peak"]').dataset.bytes),
    keys: [...document.querySelectorAll('[data-trainer-reading] li code')].map(c => c.textContent),
    cli: document.querySelector('[data-out="cli"]').textContent,
    error: document.querySelector('[data-trainer-error]').textContent})"""


def open_box(page) -> None:
    if not page.locator("[data-trainer]").evaluate("d => d.open"):
        page.click("[data-trainer] summary")


def read_box(page, text: str) -> dict:
    """Paste `text` into the box (as fill does), press Read and wait for the redraw; what the page shows."""
    open_box(page)
    page.evaluate(WATCH_DRAWN)
    page.fill("[data-trainer-text]", text)
    page.click("[data-trainer-read]")
    assert page.evaluate(AWAIT_DRAWN) == "live"
    page.wait_for_selector("[data-trainer-reading]:not([hidden])")
    return page.evaluate(SHOWN)


def cli_reading(paths: list[str], *flags: str) -> dict:
    args = [a for p in paths for a in ("--trainer-config", str(EXAMPLES / p))]
    return cli_json([*args, *flags])


@pytest.mark.parametrize("names", [
    ("axolotl/qlora.yml",),  # YAML: QLoRA, checkpointing, a paged optimizer, a preset from the Hub id
    ("llamafactory/llama3_lora_sft.yaml",),  # YAML: LoRA on all-linear, Trainer's loop (the eager figure's)
    ("accelerate/trl_zero3.yaml",),  # YAML: eight processes, ZeRO 3
    ("llamafactory/deepspeed/ds_z0_config.json",),  # JSON: DeepSpeed's own file
])
def test_a_trainer_config_gives_the_clis_numbers(open_page, names):
    """The page reads the file as `python -m calc --trainer-config FILE` does: the same peak, the same keys
    listed, and the command the page shows (the address as flags) gives that peak again."""
    page, recorder = open_page()
    got = read_box(page, "\n---\n".join((EXAMPLES / n).read_text() for n in names))
    want = cli_reading(list(names))
    assert got["error"] == ""
    assert got["peak"] == want["peak"]
    assert got["keys"][:len(want["trainer_config"]["read"])] == [f"{r['key']}: {r['value']}"
                                                                  for r in want["trainer_config"]["read"]]
    command = got["cli"].split()
    assert command[:3] == ["python", "-m", "calc"]
    assert cli_json(command[3:])["peak"] == want["peak"]
    assert "pyyaml" in " ".join(recorder.requests) or names[0].endswith(".json")  # loaded when first needed


def choose(page, names: list[str]) -> dict:
    """Choose `names` together in the box's file chooser (its `multiple`); what the page shows once it has read
    them (a redraw, or a refusal under the box)."""
    open_box(page)
    page.evaluate("() => { document.querySelector('[data-trainer-error]').textContent = 'waiting'; }")
    page.set_input_files("[data-trainer-file]", [str(EXAMPLES / n) for n in names])
    page.wait_for_function("""() => document.querySelector('[data-trainer-error]').textContent !== 'waiting'
        && (document.querySelector('[data-trainer-error]').textContent !== ''
            || !document.querySelector('[data-trainer-reading]').hidden)""")
    return page.evaluate(SHOWN)


def test_files_chosen_together_are_read_as_the_cli_reads_them(open_page):
    """LLaMA-Factory's YAML and the DeepSpeed JSON beside it, chosen together, are the CLI's two
    --trainer-config flags: the same peak. An accelerate config that disagrees with the trainer's file is
    refused in the CLI's words."""
    page, _ = open_page()
    names = ["llamafactory/llama3_lora_sft.yaml", "llamafactory/deepspeed/ds_z0_config.json"]
    page.evaluate(WATCH_DRAWN)
    got = choose(page, names)
    assert page.evaluate(AWAIT_DRAWN) == "live"
    assert got["error"] == "" and page.evaluate(SHOWN)["peak"] == cli_reading(names)["peak"]
    assert "zero_optimization.stage: 0" in page.evaluate(SHOWN)["keys"]
    names = ["accelerate/trl_zero3.yaml", "llamafactory/llama3_lora_sft.yaml"]
    done = cli_run([a for n in names for a in ("--trainer-config", str(EXAMPLES / n))])
    assert done.returncode == 2
    key = re.match(r"error: --trainer-config: ([\w.]+)", done.stderr)[1]  # finetuning_type
    assert key == "finetuning_type" and choose(page, names)["error"].startswith(f"{key} gives ")


def test_a_refused_file_is_named_and_nothing_is_lost(open_page):
    """A file the CLI refuses (LoRA on an 8-bit base) is refused under the box naming its key, as the CLI names
    it; YAML that does not parse says where; the fields and the numbers stay as they were, and the address too."""
    page, _ = open_page("?seq=1024")
    before = page.evaluate(SHOWN)
    url = settled_url(page)
    open_box(page)
    for text, key in [((EXAMPLES / "axolotl/lora-8b.yml").read_text(), "load_in_8bit"),
                      ("base_model: x\n  bad: [", "not YAML"), ("{" * 5000, "not"), ("x" * 300_000, "characters")]:
        page.fill("[data-trainer-text]", text)
        page.click("[data-trainer-read]")
        page.wait_for_function("() => document.querySelector('[data-trainer-error]').textContent !== ''")
        error = page.evaluate(SHOWN)["error"]
        assert key in error
        assert page.locator("[data-trainer-text]").get_attribute("aria-invalid") == "true"
        assert page.evaluate(SHOWN)["peak"] == before["peak"]
        assert settled_url(page) == url and page.input_value('[name="seq"]') == "1024"
    done = cli_run(["--trainer-config", str(EXAMPLES / "axolotl/lora-8b.yml")])
    assert done.returncode == 2 and "load_in_8bit: LoRA on an 8-bit" in done.stderr
    change(page, "micro-batch", "2")  # the calculator works on
    assert page.evaluate(SHOWN)["peak"] != before["peak"]


ACCELERATE_CPU = """compute_environment: LOCAL_MACHINE
debug: false
distributed_type: 'NO'
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""  # `accelerate config` on a machine without a GPU, as it writes the file


def test_a_files_device_is_not_overridden_by_the_pages_default(open_page, tmp_path):
    """The form always holds a device (cuda by default); the box sends it beside the file only where the reader
    chose another, as the CLI's flags: accelerate's `use_cpu: true` gives the page --device cpu, as the CLI."""
    path = tmp_path / "default_config.yaml"
    path.write_text(ACCELERATE_CPU)
    want = cli_json(["--trainer-config", str(path)])
    assert {"key": "use_cpu", "value": "true", "gives": "--device cpu"} in want["trainer_config"]["read"]
    page, _ = open_page()
    got = read_box(page, ACCELERATE_CPU)
    assert "device=cpu" in settled_url(page) and got["peak"] == want["peak"]
