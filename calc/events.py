"""What a walk is made of: one allocation or free, with the source of its size."""

from __future__ import annotations

from typing import NamedTuple


class Event(NamedTuple):
    """One allocation (bytes > 0) or free (bytes < 0) in one category."""

    phase: str  # "start", "forward", "backward" or "optimizer"
    label: str  # may hold "{layer}" and "{mb}" (micro-batch), filled in per repetition
    category: str
    bytes: int | str  # signed bytes, or (in a template) the name of a size from seq_sizes
    source: str  # where the size comes from
