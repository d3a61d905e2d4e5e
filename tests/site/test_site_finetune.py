"""The fine-tuning page (docs/finetune.md) as built: its numbers are calc's, its figures are readable and
offered at phone width, and the figures' lines order the methods as calc does."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from site_fixtures import built_site

import calc
from calc import finetune
from hooks import finetune as figures_hook
from hooks import placeholders

LLAMA = calc.PRESETS["llama-7b"]
ALL = tuple(finetune.linears(LLAMA))
FLASH = calc.Parallel(flash=True)
TINYLLAMA = LLAMA.replace(layers=22, hidden=2048, heads=32, kv_heads=4, ffn=5632, vocab=32000)


def _page_text() -> str:
    page = (built_site() / "finetune" / "index.html").read_text()
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", page))


def _gb(n: int) -> str:
    return f"{calc.format_gb(n)} GB"


def _step(tune: finetune.Tuning, seq: int = 2048, b: int = 1, recompute: str = "full", **kw) -> dict:
    return calc.step(LLAMA, seq, b, "bf16", recompute, par=kw.pop("par", FLASH), tune=tune, **kw)


def test_page_numbers_are_calcs():
    """Numbers the prose leans on, computed here with calc.step directly, appear on the built page."""
    text = _page_text()
    full, lora = _step(finetune.DEFAULT), _step(finetune.Tuning("lora"))
    qlora = _step(finetune.Tuning("qlora", targets=ALL))
    b = full["bytes"]
    tiny = {
        mode: calc.step(TINYLLAMA, 8192, 2, "bf16", "none", walk="eager", attention="sdpa",
                        tune=finetune.Tuning(mode, targets=ALL if mode == "lora" else ("q", "v")))
        for mode in ("full", "lora")
    }
    expected = [
        _gb(b["weights"]), _gb(b["weights"] + b["gradients"] + b["optimizer"]), f"{lora['trainable_params']:,}",
        f"{full['params']:,}", _gb(qlora["bytes"]["weights"]), _gb(full["peak"]), _gb(qlora["peak"]),
        _gb(tiny["full"]["peak"]), _gb(tiny["lora"]["peak"]),
    ]  # fmt: skip
    for value in expected:
        assert value in text, value


def test_every_placeholder_on_the_page_resolves_to_calcs_answer():
    """The page's Markdown holds no number typed for calc: each {{ calc:... }} resolves, and the methods
    table's peaks are the deck walk's for the same flags."""
    md = (placeholders.deck.ROOT / "docs" / "finetune.md").read_text()
    specs = [spec for spec in placeholders.PLACEHOLDER.findall(md) if spec.startswith("calc:")]
    assert len(specs) > 40
    for spec in specs:
        placeholders.resolve(spec)
    html = (built_site() / "finetune" / "index.html").read_text()
    row = re.search(r"<tr>\s*<td>QLoRA r8, every linear</td>(.*?)</tr>", html, re.S)
    assert row and f"<strong>{_gb(_step(finetune.Tuning('qlora', targets=ALL))['peak'])}</strong>" in row[1]


@pytest.mark.parametrize("name", ["finetune-rank", "finetune-seq"])
@pytest.mark.parametrize("narrow", [False, True])
def test_figures_have_a_readable_number_of_ticks(name, narrow):
    """Between 3 and 10 tick labels on the x axis, and a narrow variant about a phone's column wide."""
    svg = (built_site() / "figures" / f"{name}{'-narrow' if narrow else ''}.svg").read_text()
    assert 3 <= len(re.findall(r'<g id="xtick_\d+">', svg)) <= 10
    if narrow:
        width_pt = float(re.search(r'<svg[^>]* width="([\d.]+)pt"', svg)[1])
        assert width_pt * 4 / 3 <= 420


def test_page_offers_the_narrow_figures():
    """Each figure sits in a <picture> whose phone-width source a narrow screen takes."""
    html = (built_site() / "finetune" / "index.html").read_text()
    for name in ("finetune-rank", "finetune-seq"):
        assert re.search(rf'<picture><source media="[^"]+" srcset="[^"]*figures/{name}-narrow\.svg">', html)


def test_figure_lines_order_the_methods():
    """At every rank QLoRA peaks below LoRA below full fine-tuning; full fine-tuning does not depend on the
    rank, and LoRA on every linear grows with it."""
    peak = figures_hook.peak
    full = {peak("full fine-tuning", figures_hook.RANK_SEQ, r) for r in figures_hook.RANKS}
    assert len(full) == 1
    lora = [peak("LoRA all linears", figures_hook.RANK_SEQ, r) for r in figures_hook.RANKS]
    qlora = [peak("QLoRA all linears", figures_hook.RANK_SEQ, r) for r in figures_hook.RANKS]
    assert lora == sorted(lora) and lora[-1] > lora[0]
    assert all(q < lo < min(full) for q, lo in zip(qlora, lora, strict=True))


def test_without_checkpointing_lora_grows_faster_with_the_sequence():
    """The seq figure's point: without checkpointing LoRA's peak rises with the sequence faster than with it."""
    seqs = figures_hook.SEQS
    kept = [figures_hook.peak("LoRA all linears", s, 8) for s in (seqs[0], seqs[-1])]
    not_kept = [figures_hook.peak("LoRA all linears, no checkpointing", s, 8) for s in (seqs[0], seqs[-1])]
    assert not_kept[1] - not_kept[0] > 4 * (kept[1] - kept[0])


def _tinyllama(mode: str, targets=ALL) -> dict:
    """The peft#1514 step (TinyLlama, two sequences of 8,192 tokens, bf16, no checkpointing), eager walk."""
    return calc.step(TINYLLAMA, 8192, 2, "bf16", "none", walk="eager", attention="sdpa",
                     tune=finetune.Tuning(mode, targets=targets if mode == "lora" else ("q", "v")))


def test_the_lora_against_full_section_says_what_its_numbers_say():
    """Issue 20, item 4: the sentence beside 'full X against LoRA Y' says LoRA is above or below as calc's
    peaks go, and so does the activations' sentence; the heading claims neither."""
    text = " ".join(_page_text().split())
    full, lora = _tinyllama("full"), _tinyllama("lora")
    assert f"{_gb(full['peak'])} for full fine-tuning" in text and f"{_gb(lora['peak'])} for LoRA" in text
    above = lora["peak"] > full["peak"]
    assert ("LoRA above full fine-tuning" in text) == above
    assert ("LoRA below full fine-tuning" in text) == (not above)
    more = lora["bytes"]["activations"] > full["bytes"]["activations"]
    assert ("copies cost more than the frozen layers save" in text) == more
    assert ("copies cost less than the frozen layers save" in text) == (not more)
    assert "When LoRA costs more than full fine-tuning" not in text
    assert "LoRA against full fine-tuning on long sequences" in text


def test_the_state_is_so_many_times_the_card_as_calc_counts_it():
    """Issue 20, item 16: "more than twice the card" stood beside 107.8 GB and a 24 GB card; the page now
    gives the ratio calc's bytes make, for bf16 and for mixed precision."""
    text = " ".join(_page_text().split())
    card = 24 * 10**9
    bf16 = _step(finetune.DEFAULT)["bytes"]
    mixed = calc.step(LLAMA, 2048, 1, "mixed", "full", tune=finetune.DEFAULT)["bytes"]
    ratios = [sum(b[k] for k in keys) / card for b, keys in (
        (bf16, ("weights", "gradients", "optimizer")), (mixed, ("weights", "gradients", "optimizer", "master")))]
    assert f"already {ratios[0]:.1f} times the card in bf16, {ratios[1]:.1f} times with mixed precision" in text
    assert "more than twice the card" not in text


def test_the_preset_is_named_as_the_home_page_names_it_with_its_context():
    """Issue 20, item 16: llama-7b is LLaMA 7B (LLaMA 1, 2,048 tokens of context) as on the home page; the page
    says Llama 2 7B shares its shape and that the sequence figure runs past LLaMA 1's context."""
    text = " ".join(_page_text().split())
    assert "Llama-2-7B's shape" not in text and "Llama-2-7B's weights" not in text
    assert f"LLaMA 1, trained with a context of {LLAMA.context:,} tokens" in text
    assert "Llama 2 7B has the same shape" in text
    assert f"it runs to {max(figures_hook.SEQS):,} tokens, Llama 2 7B's context, past the {LLAMA.context:,}" in text
    svg = (built_site() / "figures" / "finetune-seq.svg").read_text()
    assert f"LLaMA 1's context ({LLAMA.context:,})" in svg
