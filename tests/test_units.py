"""GB and GiB formatting with exact integer rounding."""

import pytest

import calc


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0.0"),
        (49_999_999, "0.0"),
        (50_000_000, "0.1"),
        (199_539_351_552, "199.5"),
        (110_664_663_040, "110.7"),
        (-262_144_000, "-0.3"),
        (10**9 * 12_345, "12345.0"),
    ],
)
def test_format_gb_rounds_half_up(n, text):
    """One decimal, half up, no float error."""
    assert calc.format_gb(n) == text


def test_format_gib_uses_binary_units():
    """A GiB is 2^30 bytes."""
    assert calc.format_gib(2**30) == "1.0"
    assert calc.format_gb(2**30, 3) == "1.074"
