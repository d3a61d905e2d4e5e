"""One run, validated: what calc.inputs.parse_inputs answers for the CLI's flags, a link or the page's form.

A frozen dataclass, so that a run is passed whole (calc.cli, calc.web, the site's placeholders) and no caller
can change one field of it after the checks that tied the fields together (calc.inputs.eager_problem and the
others) have passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from .finetune import Tuning
from .loops import Loop
from .parallel import Parallel
from .shape import Shape


@dataclass(frozen=True)
class Run:
    """A run's validated inputs (calc.fields declares each field; calc.inputs checks them)."""

    shape: Shape  # the model: a preset's or a config's, with the shape fields given
    seq: int  # tokens a sequence
    micro_batch: int  # sequences a micro-batch
    recipe: str  # calc.recipes.RECIPES' key: the dtypes of weights, gradients, optimizer and activations
    recompute: str  # calc.recipes.RECOMPUTE: what the backward recomputes
    walk: str  # "deck" (the closed-form walk) or "eager" (the replay of the model's own code)
    attention: str  # the eager walk's attention implementation
    device: str  # the device the eager walk accounts for
    par: Parallel  # the layout over devices
    grad_accum: int | None  # micro-batches a step (None: as many as pipeline stages)
    global_batch: int  # sequences a step, for the planner
    capacity: int  # the device's memory in bytes, for the planner and the fit list
    tune: Tuning  # fine-tuning: which parameters train, LoRA's adapters, the optimizer
    hf_config: dict | None  # the given config.json in calc.hf.compact's short form (None: a preset)
    loop: Loop  # the training loop around the eager walk's step (calc.loops)
