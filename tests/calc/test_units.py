"""GB and GiB formatting with exact integer rounding."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
        (10**9 * 12_345, "12,345.0"),
    ],
)
def test_format_gb_rounds_half_up(n, text):
    """One decimal, half up, no float error."""
    assert calc.format_gb(n) == text


def test_format_gib_uses_binary_units():
    """A GiB is 2^30 bytes."""
    assert calc.format_gib(2**30) == "1.0"
    assert calc.format_gb(2**30, 3) == "1.074"
    assert calc.format_gib(1_283_700_000_000) == "1,195.5"  # separators in GiB as in GB (issue 20, item 6)


@pytest.mark.parametrize(
    ("n", "decimal", "binary"),
    [
        (0, "0.0 GB", "0.0 GiB"),
        (999, "999 B", "999 B"),
        (286_208, "286.2 kB", "279.5 KiB"),  # the course's Decoder: not "0.0 GB" (issue 20, item 5)
        (999_950, "1.0 MB", "976.5 KiB"),  # 999.95 kB rounds to 1,000.0 kB, so it reads in MB
        (49_999_999, "50.0 MB", "47.7 MiB"),  # would read "0.0 GB"
        (50_000_000, "0.1 GB", "47.7 MiB"),  # 0.1 GB: the deck's unit from here on
        (786_432_000, "0.8 GB", "0.7 GiB"),
        (110_664_663_040, "110.7 GB", "103.1 GiB"),
        (1_283_700_000_000, "1,283.7 GB", "1,195.5 GiB"),
        (9_999_949_999_999, "9,999.9 GB", "9,313.2 GiB"),
        (9_999_950_000_000, "10.0 TB", "9,313.2 GiB"),
        (2_348_000_000_000_000, "2,348.0 TB", "2,135.5 TiB"),  # not "(2186779.9 GiB)" beside TB
        (-262_144_000, "-0.3 GB", "-0.2 GiB"),
        (-26_214_400, "-26.2 MB", "-25.0 MiB"),
    ],
)
def test_format_size_picks_the_unit_by_magnitude(n, decimal, binary):
    """GB (GiB) from 0.1 to 10,000, TB (TiB) above, the largest of MB, kB (MiB, KiB) it fills below,
    else bytes; thousands separators throughout (issue 20, item 6)."""
    from calc.units import format_size

    assert format_size(n) == decimal
    assert format_size(n, binary=True) == binary


DECIMAL = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
BINARY = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@given(st.integers(min_value=-(10**19), max_value=10**19), st.booleans())
def test_format_size_reads_back_to_within_half_a_tenth(n, binary):
    """The text, read back, is n to within half its last digit, in the unit the magnitude asks for: no
    nonzero size reads "0.0 GB", none "12345.0 GB", none "1,000.0 kB"; TB (TiB) from 10,000 GB (GiB) on."""
    from calc.units import format_size

    number, name = format_size(n, binary=binary).split(" ")
    unit, step = (BINARY if binary else DECIMAL)[name], (1024 if binary else 1000)
    shown = abs(float(number.replace(",", "")))
    assert abs(shown * unit - abs(n)) <= unit / 20 + unit * 1e-9 * shown
    giga = BINARY["GiB"] if binary else DECIMAL["GB"]
    if name in ("TB", "TiB"):  # from 10,000 GB (GiB) on: 10.0 TB, 9.8 TiB
        assert shown * unit + unit / 20 >= 10_000 * giga
    elif name in ("GB", "GiB"):
        assert 0.1 <= shown < 10_000 or n == 0
    elif name == "B":
        assert shown < step
    else:
        assert 1 <= shown < step


def test_parameter_counts_read_as_the_preset_list_shows_them():
    """46.7B total, 12.9B active; 124M; below a million every digit; rounded half up on the integer."""
    from calc.units import format_count, params_label

    assert params_label(46_702_792_704, 12_879_925_248) == "46.7B total, 12.9B active"
    assert params_label(6_738_415_616, 6_738_415_616) == "6.7B"
    assert [format_count(n) for n in (124_439_808, 5_376, 1_250_000_000, 1_249_999_999, 999_999)] == [
        "124M", "5,376", "1.3B", "1.2B", "999,999"]
    assert format_count(11_339_900_000_000) == "11.3T"  # a large pasted config: not "11339.9B"
    # just under a unit: the next one, as it rounds (not "1,000M", "1,000.0B")
    assert [format_count(n) for n in (999_885_952, 999_500_000, 999_499_999, 999_960_000_000, 999_949_999_999)] == [
        "1.0B", "1.0B", "999M", "1.0T", "999.9B"]


def test_the_page_formats_sizes_as_calc_does():
    """The page's fallback (docs/javascripts/calculator/format.js, for sizes calc's answer carries no string
    for: events, sweep points, planner rows) reads every size exactly as calc.units.format_size does."""
    import json
    import subprocess

    from calc.units import format_size
    from conftest import ROOT

    rnd = random.Random(20)
    sizes = [0, 1, 999, 1000, 99_949, 99_950, 999_949, 999_950, 1_000_000, 49_999_999, 50_000_000, 99_949_999,
             99_950_000, 10**9, 9_999_949_999_999, 9_999_950_000_000,
             2_348 * 10**12, 2**53 - 1, 286_208, -1_250_000_000]
    sizes += [rnd.randrange(10 ** rnd.randrange(1, 16)) for _ in range(2000)]  # the page's bytes: at most 2^53 - 1
    module = (ROOT / "docs" / "javascripts" / "calculator" / "format.js").as_uri()
    script = (f"import {{ sizeText }} from {json.dumps(module)};"
              f"console.log(JSON.stringify({json.dumps(sizes)}.map((n) => sizeText(n))));")  # fmt: skip
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [format_size(n) for n in sizes]


def test_a_cards_memory_reads_whole_where_it_is_whole_and_the_page_agrees():
    """A device's memory (issue 20, a fresh reviewer's minor: "80.0 GB" on the home and Beyond pages):
    "80 GB" where it is a whole number of units, else format_size's one decimal; the page's capacityText
    writes the same."""
    import json
    import subprocess

    from calc.units import format_capacity
    from conftest import ROOT

    sizes = [80 * 10**9, 94_500_000_000, 80_040_000_000, 10**6, 512_000_000, 141 * 10**9, 20_000 * 10**9, 0, 1]
    want = ["80 GB", "94.5 GB", "80.0 GB", "1 MB", "0.5 GB", "141 GB", "20 TB", "0 GB", "1 B"]
    assert [format_capacity(n) for n in sizes] == want
    module = (ROOT / "docs" / "javascripts" / "calculator" / "format.js").as_uri()
    script = (f"import {{ capacityText }} from {json.dumps(module)};"
              f"console.log(JSON.stringify({json.dumps(sizes)}.map((n) => capacityText(n))));")  # fmt: skip
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == want
