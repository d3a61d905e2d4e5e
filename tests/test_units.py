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


def test_parameter_counts_read_as_the_preset_list_shows_them():
    """46.7B total, 12.9B active; 124M; below a million every digit; rounded half up on the integer."""
    from calc.units import format_count, params_label

    assert params_label(46_702_792_704, 12_879_925_248) == "46.7B total, 12.9B active"
    assert params_label(6_738_415_616, 6_738_415_616) == "6.7B"
    assert [format_count(n) for n in (124_439_808, 5_376, 1_250_000_000, 1_249_999_999, 999_999)] == [
        "124M", "5,376", "1.3B", "1.2B", "999,999"]
