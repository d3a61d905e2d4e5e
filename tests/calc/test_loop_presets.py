"""The page's loop presets (calc.loops.LOOP_PRESETS): "as Trainer runs it" and "as TRL's SFTTrainer runs it"
set calc's own fields to the values those loops default to, and the page's eager figure for them is the
CLI's --walk eager with the same flags."""

import json

import pytest

from calc import loops, web
from calc.recipes import RECIPES, RECOMPUTE
from conftest import cli_json

CHOICES = {"loop": loops.LOOPS, "adamw-impl": loops.ADAMW_IMPLS, "loss": loops.LOSSES, "recipe": tuple(RECIPES),
           "recompute": RECOMPUTE}  # fmt: skip


def _flags(fields: dict) -> list[str]:
    return [a for name, value in fields.items() for a in (f"--{name}", value)]


def test_the_presets_set_what_the_loops_default_to():
    """Trainer: fused AdamW, fp32, no checkpointing, transformers' loss; SFTTrainer: fused AdamW, bf16 autocast,
    every layer checkpointed, TRL's chunked head; every value is one of its field's choices."""
    assert loops.LOOP_PRESETS["trainer"] == {"loop": "trainer", "adamw-impl": "fused", "loss": "transformers",
                                             "recipe": "fp32-full", "recompute": "none"}  # fmt: skip
    assert loops.LOOP_PRESETS["sft"]["recipe"] == "autocast" and loops.LOOP_PRESETS["sft"]["recompute"] == "full"
    for fields in loops.LOOP_PRESETS.values():
        assert all(value in CHOICES[name] for name, value in fields.items())
    # the loop's own pick is what the preset names
    assert all(loops.Loop(f["loop"]).impl("cuda") == f["adamw-impl"] for f in loops.LOOP_PRESETS.values())
    assert all(loops.Loop(f["loop"]).loss_kind == f["loss"] for f in loops.LOOP_PRESETS.values())


@pytest.mark.parametrize("preset", sorted(loops.LOOP_PRESETS))
def test_the_pages_figure_for_a_preset_is_the_clis(preset):
    """The page's answer for a preset's fields (calc.web) carries the eager figure the CLI gives for its flags."""
    fields = loops.LOOP_PRESETS[preset]
    base = {"preset": "llama-3.2-1b", "seq": "2048"}
    got = json.loads(web.handle(json.dumps({"inputs": {**base, **fields}, "sweep": False})))
    assert got["ok"], got
    cli = cli_json(["--preset", "llama-3.2-1b", "--seq", "2048", "--walk", "eager", *_flags(fields)])
    assert got["eager"]["peak"] == cli["peak"]
    plain = json.loads(web.handle(json.dumps({"inputs": base, "sweep": False})))
    assert got["eager"]["peak"] != plain["eager"]["peak"]
