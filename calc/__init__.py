"""Training-memory calculator: parameters, bytes per parameter, activations and a
step-by-step walk whose maximum is the peak. Standard library only (CPython and Pyodide)."""

from . import web
from .activations import kept_bytes, layer_bytes, logits_bytes
from .api import sizes, step, sweep, table
from .counts import param_counts
from .inputs import InputError, parse_inputs
from .parallel import SINGLE, Parallel, device_params
from .plan import TP_DEGREES, plan, recompute_overhead
from .presets import PRESETS
from .recipes import RECIPES, RECOMPUTE, TABLE_ROWS, Recipe
from .run import Run
from .shape import Shape
from .units import GB, GIB, format_gb, format_gib
from .walk import CATEGORIES, CATEGORY_LABELS

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "CATEGORY_LABELS",
    "GB",
    "GIB",
    "PRESETS",
    "RECIPES",
    "RECOMPUTE",
    "SINGLE",
    "TABLE_ROWS",
    "TP_DEGREES",
    "InputError",
    "Parallel",
    "Recipe",
    "Run",
    "Shape",
    "device_params",
    "format_gb",
    "format_gib",
    "kept_bytes",
    "layer_bytes",
    "logits_bytes",
    "param_counts",
    "parse_inputs",
    "plan",
    "recompute_overhead",
    "sizes",
    "step",
    "sweep",
    "table",
    "web",
]
