"""The prose's comparisons are checked against calc's numbers when the site is built (hooks/claims.py):
a claim the numbers do not bear out fails the build; calc-if words follow the numbers either way."""

from __future__ import annotations

from fractions import Fraction

import pytest
from mkdocs.exceptions import PluginError

import calc
from hooks import claims, placeholders

LONG, SHORT = "calc:llama-7b seq=8192 step.peak", "calc:llama-7b seq=2048 step.peak"


class Page:
    class file:
        src_uri = "finetune.md"


def build(markdown: str) -> str:
    return placeholders.on_page_markdown(markdown, Page, None, None)


def test_a_true_claim_says_nothing_and_a_false_one_fails_the_build_naming_its_numbers():
    """'{{ calc-claim: A > B }}' leaves no text when A > B, and stops the build, with both numbers, when not."""
    assert build(f"Longer costs more.{{{{ calc-claim: {LONG} > {SHORT} }}}}") == "Longer costs more."
    long_peak = calc.step(calc.PRESETS["llama-7b"], 8192, 1)["peak"]
    with pytest.raises(PluginError, match=rf"finetune\.md: the prose claims .* give {long_peak:,} < \d"):
        build(f"Longer costs less.{{{{ calc-claim: {LONG} < {SHORT} }}}}")


@pytest.mark.parametrize(("op", "words"), [(">", "more"), ("<", "less")])
def test_calc_if_takes_the_words_that_are_true(op, words):
    """The same sentence, asked either way round, reads what calc's numbers say: 8,192 tokens cost more."""
    text = build(f"It costs {{{{ calc-if: {LONG} {op} {SHORT} }}}}{words}{{{{ calc-else }}}}"
                 f"{'less' if words == 'more' else 'more'}{{{{ calc-end }}}}.")
    assert text == "It costs more."


def test_calc_if_resolves_the_placeholders_inside_the_chosen_words():
    """The words chosen may hold placeholders: they are resolved like the rest of the page; no else part is fine."""
    text = build(f"{{{{ calc-if: {LONG} > 2 * {SHORT} }}}}More than twice: {{{{ {LONG} }}}}.{{{{ calc-end }}}}")
    assert text == f"More than twice: {placeholders.resolve(LONG)}."
    assert build(f"{{{{ calc-if: {LONG} < {SHORT} }}}}never{{{{ calc-end }}}}") == ""


def test_a_ratio_is_calcs_rounded_half_up():
    """'{{ calc-ratio: A / B }}' is A / B to one decimal, half up on exact integers."""
    assert claims.ratio(Fraction(107_800_000_000), Fraction(24 * 10**9)) == "4.5"
    assert claims.ratio(Fraction(45), Fraction(10)) == "4.5" and claims.ratio(Fraction(449), Fraction(100)) == "4.5"
    assert claims.ratio(Fraction(444), Fraction(100)) == "4.4"
    peak = calc.step(calc.PRESETS["llama-7b"], 8192, 1)["peak"]
    short = calc.step(calc.PRESETS["llama-7b"], 2048, 1)["peak"]
    assert build(f"{{{{ calc-ratio: {LONG} / {SHORT} }}}}") == claims.ratio(Fraction(peak), Fraction(short))


@pytest.mark.parametrize(
    "body",
    [f"calc-claim: {LONG} >> {SHORT}", f"calc-claim: {LONG}", f"calc-claim: {LONG} > llama-7b step.peak",
     f"calc-claim: {LONG} > calc:llama-7b step.config.recipe", f"calc-ratio: {LONG} / 0",
     f"calc-claim: calc:llama-7b step.bogus > {SHORT}"],
)
def test_a_claim_that_does_not_parse_fails_the_build(body):
    """An operator, operand or path calc cannot read is a build error naming the page, never a silent pass."""
    with pytest.raises(PluginError, match=r"finetune\.md: "):
        build(f"text {{{{ {body} }}}}")


def test_a_stray_else_or_end_fails_the_build():
    """A calc-else or calc-end with no calc-if before it is not left on the page."""
    for body in ("calc-else", "calc-end"):
        with pytest.raises(PluginError, match=r"finetune\.md: "):
            build(f"text {{{{ {body} }}}}")


def test_every_page_states_its_comparisons_through_calc():
    """The pages that compare calc's numbers in words do it through claims: the fine-tuning page's LoRA
    section and its card ratio, the home page's doubling and the Beyond page's opening."""
    root = placeholders.deck.ROOT / "docs"
    finetune = (root / "finetune.md").read_text()
    assert finetune.count("calc-if:") >= 2 and "calc-ratio:" in finetune and "calc-claim:" in finetune
    assert "calc-claim:" in (root / "index.md").read_text()
    assert "calc-claim:" in (root / "beyond.md").read_text()
