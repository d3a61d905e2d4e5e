"""Byte and count formatting. GB is 10^9 bytes, as in the deck; GiB is 2^30.

Every size a reader sees comes from `format_size`: it picks the unit by magnitude (B, kB, MB, GB,
TB or B, KiB, MiB, GiB, TiB), groups thousands, and rounds half up on the integer (no float error).
"""

import itertools

GB = 10**9
GIB = 2**30
TB = 10**12

DECIMAL_UNITS = (("B", 1), ("kB", 10**3), ("MB", 10**6), ("GB", GB), ("TB", TB))  # SI prefixes
BINARY_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", GIB), ("TiB", 2**40))  # IEC 80000-13
TB_FROM_GB = 10_000  # the deck counts in GB: a size reads in TB (TiB) only from 10,000 GB (GiB) on


def format_gb(n: int, decimals: int = 1) -> str:
    """Bytes as a number of GB with thousands separators ("1,283.7"), rounded half up."""
    return _grouped(_fixed(n, GB, decimals))


def format_gib(n: int, decimals: int = 1) -> str:
    """Bytes as a number of GiB with thousands separators ("1,195.6"), rounded half up."""
    return _grouped(_fixed(n, GIB, decimals))


def format_size(n: int, binary: bool = False) -> str:
    """Bytes for people, in the unit that fits: "512 B", "286.2 kB", "110.7 GB", "1,283.7 GB",
    "2,348.0 TB"; with binary=True "1,195.6 GiB", "2,135.5 TiB". One decimal above bytes."""
    units = BINARY_UNITS if binary else DECIMAL_UNITS
    name, unit = units[0]
    for (_, below), (bigger, size) in itertools.pairwise(units):
        floor = below * TB_FROM_GB if bigger in ("TB", "TiB") else size
        if _shows_at_least(n, below, floor):
            name, unit = bigger, size
    if unit == 1:
        return f"{n:,} B"
    return f"{format_unit(n, unit)} {name}"


def format_unit(n: int, unit: int, decimals: int = 1) -> str:
    """Bytes as a number of `unit`-byte units, grouped and rounded half up: (286_208, 1000) -> "286.2"."""
    return _grouped(_fixed(n, unit, decimals))


def _shows_at_least(n: int, below: int, floor: int) -> bool:
    """Whether |n| reaches `floor` bytes once shown to one decimal in units of `below` bytes
    (999,960 B shows as 1,000.0 kB, so it reads 1.0 MB instead)."""
    return abs(n) * 20 + below >= floor * 20  # round(|n| / below, 1), half up, >= floor / below


def _fixed(n: int, unit: int, decimals: int) -> str:
    scale = 10**decimals
    sign = "-" if n < 0 else ""
    q = (abs(n) * scale * 2 + unit) // (2 * unit)  # round half up
    whole, frac = divmod(q, scale)
    return f"{sign}{whole}.{frac:0{decimals}d}" if decimals else f"{sign}{whole}"


def _grouped(text: str) -> str:
    """ "-12345.6" -> "-12,345.6": thousands separators on the whole part."""
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    whole, dot, frac = digits.partition(".")
    return f"{sign}{int(whole):,}{dot}{frac}"


COUNT_UNITS = (("T", 10**12, 1), ("B", 10**9, 1), ("M", 10**6, 0))  # suffix, size, decimals


def format_count(n: int) -> str:
    """A parameter count for a label: "11.3T", "46.7B", "124M", or "5,376" below a million (half up)."""
    for suffix, size, decimals in COUNT_UNITS:
        if n >= size:
            return f"{_grouped(_fixed(n, size, decimals))}{suffix}"
    return f"{n:,}"


def params_label(total: int, active: int) -> str:
    """A model's size for a list of models: "6.7B", or "46.7B total, 12.9B active" for a mixture of experts."""
    if active == total:
        return format_count(total)
    return f"{format_count(total)} total, {format_count(active)} active"
