"""Byte and count formatting. GB is 10^9 bytes, as in the deck; GiB is 2^30.

Every size a reader sees comes from `format_size`: it picks the unit by magnitude (B, kB, MB, GB,
TB or B, KiB, MiB, GiB, TiB) around the deck's GB, groups thousands, and rounds half up on the
integer (no float error).
"""

GB = 10**9
GIB = 2**30
TB = 10**12

DECIMAL_UNITS = (("B", 1), ("kB", 10**3), ("MB", 10**6), ("GB", GB), ("TB", TB))  # SI prefixes
BINARY_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", GIB), ("TiB", 2**40))  # IEC 80000-13
TB_FROM_GB = 10_000  # the deck counts in GB: a size reads in TB (TiB) only from 10,000 GB (GiB) on,
# and in MB (MiB) or smaller only below 0.1 GB (GiB), where one decimal of GB would show "0.0"


def format_gb(n: int, decimals: int = 1) -> str:
    """Bytes as a number of GB with thousands separators ("1,283.7"), rounded half up."""
    return _grouped(_fixed(n, GB, decimals))


def format_gib(n: int, decimals: int = 1) -> str:
    """Bytes as a number of GiB with thousands separators ("1,195.6"), rounded half up."""
    return _grouped(_fixed(n, GIB, decimals))


def format_size(n: int, binary: bool = False) -> str:
    """Bytes for people. GB is the home unit, as in the deck (so a table's column reads in one unit):
    "0.8 GB", "110.7 GB", "1,283.7 GB", from 10,000 GB on "2,348.0 TB"; a size that would read under
    "0.1 GB" takes the largest smaller unit it fills: "49.9 MB", "286.2 kB", "512 B". With binary=True
    the same in GiB, TiB, MiB and KiB. One decimal, rounded half up; zero is "0.0 GB"."""
    (b, _), (kilo, k), (mega, m), (giga, g), (tera, t) = BINARY_UNITS if binary else DECIMAL_UNITS
    if _tenths(n, g) >= 10 * TB_FROM_GB:
        return f"{format_unit(n, t)} {tera}"
    if n == 0 or _tenths(n, g) >= 1:  # shows at least 0.1 GB
        return f"{format_unit(n, g)} {giga}"
    if _tenths(n, k) >= 10 * (m // k):  # would show 1,000.0 kB (1,024.0 KiB) or more
        return f"{format_unit(n, m)} {mega}"
    if abs(n) >= k:
        return f"{format_unit(n, k)} {kilo}"
    return f"{n:,} {b}"


def format_capacity(n: int) -> str:
    """A device's memory as format_size writes it, less a ".0" where the size is that many units exactly:
    "80 GB", "94.5 GB", "1 MB", but "80.0 GB" for 80.04 GB (a card's size is a whole number of GB)."""
    text = format_size(n)
    number, unit = text.split(" ")
    size = dict(DECIMAL_UNITS)[unit]
    return f"{number.removesuffix('.0')} {unit}" if number.endswith(".0") and n % size == 0 else text


def format_unit(n: int, unit: int, decimals: int = 1) -> str:
    """Bytes as a number of `unit`-byte units, grouped and rounded half up: (286_208, 1000) -> "286.2"."""
    return _grouped(_fixed(n, unit, decimals))


def _tenths(n: int, unit: int) -> int:
    """|n| in tenths of `unit`, rounded half up as shown (999,950 B is 10,000 tenths of a kB)."""
    return (abs(n) * 20 + unit) // (2 * unit)


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
    """A parameter count for a label: "11.3T", "46.7B", "124M", or "5,376" below a million (half up); a count
    that rounds to a thousand of its unit reads in the next one (999,885,952: "1.0B", not "1,000M")."""
    for i, (suffix, size, decimals) in enumerate(COUNT_UNITS):
        if n >= size:
            text = _fixed(n, size, decimals)
            if i and int(text.partition(".")[0]) >= 1000:
                bigger, big, places = COUNT_UNITS[i - 1]
                return f"{_fixed(n, big, places)}{bigger}"
            return f"{_grouped(text)}{suffix}"
    return f"{n:,}"


def params_label(total: int, active: int) -> str:
    """A model's size for a list of models: "6.7B", or "46.7B total, 12.9B active" for a mixture of experts."""
    if active == total:
        return format_count(total)
    return f"{format_count(total)} total, {format_count(active)} active"
