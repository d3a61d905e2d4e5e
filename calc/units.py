"""Byte formatting. GB is 10^9 bytes, as in the deck; GiB is 2^30."""

GB = 10**9
GIB = 2**30


def format_gb(n: int, decimals: int = 1) -> str:
    """Bytes as GB, rounded half up with integer arithmetic (no float error)."""
    return _fixed(n, GB, decimals)


def format_gib(n: int, decimals: int = 1) -> str:
    return _fixed(n, GIB, decimals)


def _fixed(n: int, unit: int, decimals: int) -> str:
    scale = 10**decimals
    sign = "-" if n < 0 else ""
    q = (abs(n) * scale * 2 + unit) // (2 * unit)  # round half up
    whole, frac = divmod(q, scale)
    return f"{sign}{whole}.{frac:0{decimals}d}" if decimals else f"{sign}{whole}"
