"""What the prose says about calc's numbers, checked against them when the site is built.

Three forms in a page's Markdown, each operand a placeholder body (``calc:PRESET [FIELD=VALUE ...] PATH``,
hooks/placeholders.py), optionally scaled (``2 * calc:...``), or a plain number:

    {{ calc-claim: A > B }}        states nothing; fails the build unless A > B (also <, >=, <=, ==)
    {{ calc-if: A > B }} words {{ calc-else }} other words {{ calc-end }}
                                   the words that are true for calc's numbers (the else part is optional)
    {{ calc-ratio: A / B }}        A / B to one decimal, rounded half up on the integers ("4.5")

So a sentence that compares two numbers either follows them or stops the build.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from fractions import Fraction

COMPARISONS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, ">": operator.gt, "<": operator.lt}
COMPARISON = re.compile(r"\s(>=|<=|==|>|<)\s")
SCALED = re.compile(r"^(\d+(?:\.\d+)?)\s*\*\s*(.+)$")  # "2 * calc:..." or "1.5 * calc:..."
NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
CLAIM = re.compile(r"\{\{\s*calc-claim:\s*(.*?)\s*\}\}")
RATIO = re.compile(r"\{\{\s*calc-ratio:\s*(.*?)\s+/\s+(.*?)\s*\}\}")
IF_BLOCK = re.compile(
    r"\{\{\s*calc-if:\s*(?P<test>.*?)\s*\}\}(?P<then>.*?)"
    r"(?:\{\{\s*calc-else\s*\}\}(?P<other>.*?))?\{\{\s*calc-end\s*\}\}",
    re.DOTALL,
)

Value = Callable[[str], int | float]  # a placeholder body to its number (placeholders.value)


class ClaimError(ValueError):
    """A claim the numbers do not bear out, or one that does not parse."""


def operand(text: str, value: Value) -> Fraction:
    """'2 * calc:llama-7b step.peak', 'calc:...' or '24' as an exact number."""
    text = text.strip()
    if NUMBER.match(text):
        return Fraction(text)
    scaled = SCALED.match(text)
    factor, spec = (Fraction(scaled[1]), scaled[2]) if scaled else (Fraction(1), text)
    if not spec.startswith("calc:"):
        raise ClaimError(f"expected a number or calc:PRESET ... PATH, got {spec!r}")
    number = value(spec)
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ClaimError(f"{spec!r} is {number!r}, not a number")
    return factor * Fraction(number)


def holds(test: str, value: Value) -> tuple[bool, str]:
    """Whether 'A OP B' is true for calc's numbers, and the comparison with its numbers, for a message."""
    parts = COMPARISON.split(test, maxsplit=1)
    if len(parts) != 3:
        raise ClaimError(f"expected A OP B with OP one of {', '.join(COMPARISONS)}, got {test!r}")
    left, op, right = parts
    a, b = operand(left, value), operand(right, value)
    return COMPARISONS[op](a, b), f"{_shown(a)} {op} {_shown(b)}"


def _shown(x: Fraction) -> str:
    """A whole number with every digit (bytes), anything else to six significant figures."""
    return f"{x.numerator:,}" if x.denominator == 1 else f"{float(x):.6g}"


def ratio(a: Fraction, b: Fraction) -> str:
    """a / b to one decimal, rounded half up: (107.8e9, 24e9) -> '4.5'."""
    if b <= 0:
        raise ClaimError("the ratio's divisor must be positive")
    tenths = int(a * 20 / b + 1) // 2  # floor(10 a / b + 1/2)
    return f"{tenths // 10:,}.{tenths % 10}"


def apply(markdown: str, value: Value) -> str:
    """The Markdown with every claim checked, every calc-if resolved and every ratio written out."""
    def choose(m: re.Match) -> str:
        true, _ = holds(m["test"], value)
        return m["then"] if true else (m["other"] or "")

    def check(m: re.Match) -> str:
        true, numbers = holds(m[1], value)
        if not true:
            raise ClaimError(f"the prose claims {m[1]!r}, but calc's numbers give {numbers}")
        return ""

    markdown = IF_BLOCK.sub(choose, markdown)
    markdown = CLAIM.sub(check, markdown)
    return RATIO.sub(lambda m: ratio(operand(m[1], value), operand(m[2], value)), markdown)
