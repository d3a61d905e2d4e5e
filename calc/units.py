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


TB = 10**12
TB_FROM_GB = 10_000  # from 10,000 GB on, a size reads better in TB


def format_size(n: int) -> str:
    """Bytes for people: "110.7 GB", "1,234.5 GB" with thousands separators, and from
    10,000 GB on "861.1 TB". One decimal, rounded half up as format_gb."""
    text, name = _fixed(n, GB, 1), "GB"
    if abs(float(text)) >= TB_FROM_GB:
        text, name = _fixed(n, TB, 1), "TB"
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    whole, frac = digits.split(".")
    return f"{sign}{int(whole):,}.{frac} {name}"


def format_count(n: int) -> str:
    """A parameter count for a label: "46.7B", "124M", or "5,376" below a million (half up, as format_gb)."""
    if n >= 10**9:
        return f"{_fixed(n, 10**9, 1)}B"
    if n >= 10**6:
        return f"{_fixed(n, 10**6, 0)}M"
    return f"{n:,}"


def params_label(total: int, active: int) -> str:
    """A model's size for a list of models: "6.7B", or "46.7B total, 12.9B active" for a mixture of experts."""
    if active == total:
        return format_count(total)
    return f"{format_count(total)} total, {format_count(active)} active"
