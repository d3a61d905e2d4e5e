"""The course's reference Decoder (scripts/training/reference.py): no config.json; the eager walk's closed form
for it is calc.eager's."""

from __future__ import annotations

from .family import Family

MODEL_TYPES = ()
FAMILIES = (Family("decoder", ("the course's Decoder",), closed_form=True),)
ORDER = 90  # where the registry lists it (calc.families)
