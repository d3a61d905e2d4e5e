#!/usr/bin/env python3
"""Measure the training loops people run, and record what today's CLI predicts for each (issue 19's groundwork).

Each run builds a transformers model from a config with random weights (hf_models.py; nothing is downloaded)
and trains it through a loop as it comes, for two optimizer steps; the second is measured with
profile_step's harness (every allocation of PyTorch's CPU allocator; on CUDA the caching allocator's
max_memory_allocated and max_memory_reserved). The loops:

    trainer         transformers' Trainer with its defaults: optim adamw_torch_fused inside accelerate's
                    optimizer wrapper, max_grad_norm 1.0; bf16=True for "autocast", off for "fp32-full"
    trainer-accum2  the same with gradient_accumulation_steps=2 (the measured step spans two micro-batches)
    trainer-adamw   optim="adamw_torch" (PyTorch's own pick: single-tensor on the CPU, foreach on CUDA)
    trainer-sgd     optim="sgd" (no momentum) and trainer-sgd-momentum (optim_args "momentum=0.9")
    trainer-adafactor  optim="adafactor" (transformers' Adafactor, as Trainer configures it)
    trainer-lion    optim="lion_32bit" and trainer-adamw-8bit (optim="adamw_bnb_8bit"): bitsandbytes' optimizers
    trainer-torchtune-ce  Trainer (full fine-tuning) with torchtune's chunked cross-entropy: the model's forward
                    patched as torchtune runs its models with CEWithChunkedOutputLoss (torchtune_loss below, a
                    re-implementation of its source: torchtune is not installed here)
    sft-lora        TRL's SFTTrainer with a peft LoraConfig (r 8, alpha 16, q_proj and v_proj): TRL patches the
                    model with its chunked, fused log-prob head (trl.trainer.utils.add_fused_lm_head), so the
                    b x s x V logits are never built. TRL's defaults are bf16 and gradient checkpointing; the grid
                    also runs them off.

Each on llama and qwen2, two shapes (in one the vocabulary dominates), fp32 and autocast, checkpointing off
and on, sdpa attention (what from_config picks). The prediction is the CLI's from the config.json and the
flags a user would type (calc_cli.py), by the eager walk and by the deck walk, or its refusal.
Results: docs/data/loops.json (make_results.py).

    python scripts/training/measure_loops.py                 # measure on the CPU, print a table
    python scripts/training/measure_loops.py --write         # and write docs/data/loops.json
    python scripts/training/measure_loops.py --dry-run       # one small step of each loop, nothing written
    python scripts/training/measure_loops.py --repredict --write   # ask the CLI again (calc changed), measure none
    python scripts/training/measure_loops.py --device cuda --write
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import calc_cli  # noqa: E402
import hf_models  # noqa: E402
import measure_transformers  # noqa: E402
import profile_step  # noqa: E402
import torch  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402

RESULTS = ROOT / "docs" / "data" / "loops.json"
STEPS = 2  # optimizer steps: a warm-up (the optimizer makes its state) and the measured one


@dataclass(frozen=True)
class Loop:
    """A training loop as a user runs it, and the calc flags that say the same."""

    name: str
    optim: str = "adamw_torch_fused"  # Trainer's default on torch >= 2.8
    optim_args: str | None = None
    accumulation: int = 1  # gradient_accumulation_steps
    sft_lora: bool = False  # TRL's SFTTrainer with peft's LoRA
    torchtune_ce: bool = False  # the forward patched with torchtune's chunked cross-entropy (torchtune_loss)
    flags: tuple[str, ...] = ()  # what a user adds to the calc command for this loop


# What a user adds to the calc command for each loop: calc's --loop says which loop's tensors the step holds
# (Trainer's collator and clipping, TRL's chunked head), the rest what the loop was given.
TRAINER = ("--loop", "trainer")
LORA = ("--loop", "sft", "--finetune", "lora", "--lora-rank", "8", "--lora-alpha", "16", "--lora-targets", "q,v")
LOOPS = {  # every loop measured, by name (the module's docstring says what each runs)
    loop.name: loop
    for loop in (
        Loop("trainer", flags=TRAINER),
        Loop("trainer-accum2", accumulation=2, flags=(*TRAINER, "--grad-accum", "2")),
        Loop("trainer-adamw", optim="adamw_torch", flags=(*TRAINER, "--adamw-impl", "single")),
        Loop("trainer-sgd", optim="sgd", flags=(*TRAINER, "--optimizer", "sgd")),
        Loop("trainer-sgd-momentum", optim="sgd", optim_args="momentum=0.9",
             flags=(*TRAINER, "--optimizer", "sgd-momentum")),
        Loop("trainer-adafactor", optim="adafactor", flags=(*TRAINER, "--optimizer", "adafactor")),
        Loop("trainer-lion", optim="lion_32bit", flags=(*TRAINER, "--optimizer", "lion")),  # bitsandbytes' Lion
        Loop("trainer-adamw-8bit", optim="adamw_bnb_8bit", flags=(*TRAINER, "--optimizer", "adamw-8bit")),
        Loop("trainer-torchtune-ce", torchtune_ce=True, flags=(*TRAINER, "--loss", "torchtune-chunked")),
        Loop("sft-lora", sft_lora=True, flags=LORA),  # TRL's SFTTrainer with LoraConfig(r=8, alpha 16, q and v)
    )
}
# Two shapes a family: the layers take the peak (a small vocabulary), and the vocabulary dominates.
SHAPES = [
    (hf_models.Model("llama", 3, 64, 4, 2, 176, 256), 128, 2),
    (hf_models.Model("llama", 2, 64, 4, 2, 176, 4096), 64, 2),
    (hf_models.Model("qwen2", 3, 64, 4, 2, 176, 256), 128, 2),
    (hf_models.Model("qwen2", 2, 64, 4, 2, 176, 4096), 64, 2),
]
GRID = list(itertools.product(hf_models.PRECISIONS, hf_models.CHECKPOINTING))
ATTENTION = "sdpa"  # transformers' default attn_implementation


class _Marker(TrainerCallback):
    """A TrainerCallback that opens the harness's mark as the second optimizer step begins and closes it as
    that step ends (after optimizer.step and zero_grad)."""

    def __init__(self, mark):
        self.mark, self.open = mark, None

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == STEPS - 1:
            self.open = self.mark()
            self.open.__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self.open is not None and state.global_step == STEPS:
            self.open.__exit__(None, None, None)
            self.open = None


def _tokenizer(vocab: int):
    """A word-level tokenizer of `vocab` entries, built here (TRL wants a processing class; nothing downloaded)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(words, unk_token="w0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", pad_token="w0", eos_token="w1")


def _arguments(loop: Loop, precision: str, checkpointing: str, b: int, device: str, folder: str) -> dict:
    """The TrainingArguments (or SFTConfig) fields a user sets; everything else stays the loop's default."""
    return {
        "output_dir": folder,
        "per_device_train_batch_size": b,
        "gradient_accumulation_steps": loop.accumulation,
        "max_steps": STEPS,
        "optim": loop.optim,
        "optim_args": loop.optim_args,
        "bf16": precision == "autocast",
        "gradient_checkpointing": checkpointing == "full",
        "use_cpu": device == "cpu",
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_pin_memory": False,
    }


def torchtune_loss(net, chunks: int = 8) -> None:
    """Patch a transformers causal LM's forward to compute its loss as torchtune does with
    CEWithChunkedOutputLoss(num_output_chunks=8), re-implemented from torchtune's source (not installed here):
    TransformerDecoder.chunked_output (torchtune/modules/transformer.py) applies the head to each piece of
    last_hidden_state.tensor_split(chunks, dim=1); the recipes shift the labels left and pad them with -100
    (torch.hstack, recipes/full_finetune_single_device.py); CEWithChunkedOutputLoss.forward
    (torchtune/modules/loss/ce_chunked_output_loss.py) splits the labels the same way (reshape(-1) each),
    upcasts one chunk at a time (logits.float()) into cross_entropy(reduction="sum") and divides the sum by
    the tokens scored. Patched as TRL patches its head: a bound method, so accelerate can wrap it in autocast."""
    import types

    from torch.nn import functional
    from transformers.modeling_outputs import CausalLMOutputWithPast

    def forward(self, input_ids=None, labels=None, attention_mask=None, **kwargs):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = [self.lm_head(chunk) for chunk in hidden.tensor_split(chunks, dim=1)]
        labels = torch.hstack((labels[..., 1:], torch.full_like(labels[..., :1], -100)))
        total = (labels != -100).sum()
        targets = [chunk.reshape(-1) for chunk in labels.tensor_split(chunks, dim=1)]
        loss = 0.0
        for chunk, target in zip(logits, targets, strict=True):
            chunk = chunk.reshape(-1, chunk.size(-1))
            loss += functional.cross_entropy(chunk.float(), target, ignore_index=-100, reduction="sum")
        return CausalLMOutputWithPast(loss=loss / total)

    net.forward = types.MethodType(forward, net)


def _trainer(loop: Loop, m: hf_models.Model, precision: str, checkpointing: str, b: int, data, device: str):
    """The loop's trainer, model built inside the measurement (random weights, as hf_models builds it)."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    folder = tempfile.mkdtemp(prefix="loops-")
    net = hf_models.build(m, ATTENTION, "none")  # the trainer enables checkpointing itself, from its arguments
    fields = _arguments(loop, precision, checkpointing, b, device, folder)
    if loop.torchtune_ce:
        torchtune_loss(net)
    if not loop.sft_lora:
        return Trainer(model=net, args=TrainingArguments(**fields), train_dataset=data,
                       data_collator=default_data_collator)  # fmt: skip
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"])
    return SFTTrainer(model=net, args=SFTConfig(**fields, max_length=None), train_dataset=data,
                      processing_class=_tokenizer(m.vocab), peft_config=lora)  # fmt: skip


def _dataset(loop: Loop, m: hf_models.Model, seq: int, b: int):
    """Enough token batches for the two steps: Trainer gets dicts of tensors, TRL a datasets.Dataset of ids."""
    n = STEPS * loop.accumulation * b
    rows = hf_models.tokens(m.vocab, seq, n, 0)
    if loop.sft_lora:
        from datasets import Dataset

        return Dataset.from_dict({"input_ids": rows.tolist()})
    return [{"input_ids": r, "labels": r} for r in rows]


def measure_step(loop: Loop, m: hf_models.Model, precision: str, checkpointing: str, seq: int, b: int,
                 device: str = "cpu") -> dict:  # fmt: skip
    """The second optimizer step's peak through the loop, in bytes, and the parameters it trains."""
    data = _dataset(loop, m, seq, b)

    def body(mark):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers 5's and peft's deprecation notes
            trainer = _trainer(loop, m, precision, checkpointing, b, data, device)
            trainer.remove_callback(PrinterCallback)  # it prints the logs; it holds no tensor
            trainer.add_callback(_Marker(mark))
            trainer.train()
        return trainer

    got, trainer = profile_step.on(device, body)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return {**got, "measured_trainable": trainable}


def cli_args(loop: Loop, m: hf_models.Model, seq: int, b: int, precision: str, checkpointing: str, device: str):
    """The command a user types: their config.json, the step, and the loop's own flags."""
    config = calc_cli.config_file(f"{m.model_type}-{m.layers}x{m.hidden}-v{m.vocab}", m.config())
    run = ["--hf-config", str(config), "--seq", seq, "--micro-batch", b, "--walk", "eager", "--recipe", precision]
    run += ["--attention", ATTENTION, "--recompute", checkpointing, "--device", device]
    return [str(a) for a in run] + list(loop.flags)


def recorded_args(row: dict) -> list[str]:
    """The command a user types for a recorded row (cli_args from the row's own fields)."""
    m = row["model"]
    model = hf_models.Model(**{**m, "extra": tuple((k, v) for k, v in m["extra"])})
    return cli_args(LOOPS[row["loop"]], model, row["seq"], row["micro_batch"], row["precision"], row["checkpointing"],
                    row["device"])  # fmt: skip


def measure(loop: Loop, m: hf_models.Model, seq: int, b: int, precision: str, checkpointing: str,
            device: str = "cpu") -> dict:  # fmt: skip
    """One row: the loop, the step, what was measured and what the CLI says."""
    t0 = time.perf_counter()
    got = measure_step(loop, m, precision, checkpointing, seq, b, device)
    args = cli_args(loop, m, seq, b, precision, checkpointing, device)
    return {
        "loop": loop.name,
        "model_type": m.model_type,
        "model": asdict(m),
        "seq": seq,
        "micro_batch": b,
        "precision": precision,
        "attention": ATTENTION,
        "checkpointing": checkpointing,
        "device": device,
        **got,
        "eager": calc_cli.compared(args, got["measured_peak"]),
        "deck": calc_cli.compared(calc_cli.deck_args(args), got["measured_peak"]),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def runs(loops, dry_run: bool = False):
    """(loop, model, seq, micro-batch, precision, checkpointing) for every measured step."""
    shapes = SHAPES[:1] if dry_run else SHAPES
    grid = GRID[:1] if dry_run else GRID
    for name in loops:
        for (m, seq, b), (precision, checkpointing) in itertools.product(shapes, grid):
            yield LOOPS[name], m, seq, b, precision, checkpointing


def show(row: dict) -> str:
    e = row["eager"]
    said = f"{e['peak']:>11,} {e['ratio']:.4f}" if "peak" in e else "refused: " + e["refused"]
    return (f"{row['loop']:21} {row['model_type']:6} v{row['model']['vocab']:<5} {row['precision']:9} "
            f"{row['checkpointing']:4} {row['measured_peak']:>11,}  {said}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="measure_loops.py", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    p.add_argument("--loop", action="append", choices=list(LOOPS), help="only these loops")
    p.add_argument("--dry-run", action="store_true", help="one small step of each loop; nothing written")
    p.add_argument("--repredict", action="store_true", help="ask the CLI again for the recorded steps; measure none")
    args = p.parse_args(argv)
    if args.repredict:
        data = json.loads(RESULTS.read_text())
        calc_cli.repredict(data["runs"], recorded_args)
        if args.write:
            RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        p.exit(2, "measure_loops.py: error: --device cuda: this machine has no CUDA device\n")
    rows = []
    for run in runs(args.loop or list(LOOPS), args.dry_run):
        rows.append(measure(*run, device=args.device))
        print(show(rows[-1]), flush=True)
    if args.write and not args.dry_run:
        import peft
        import trl

        env = f"{measure_transformers.environment(args.device)}, peft {peft.__version__}, trl {trl.__version__}"
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"environment": {}, "runs": []}
        measured = {(r["loop"], r["device"]) for r in rows}  # the loops measured now replace their rows
        kept = [r for r in old["runs"] if (r["loop"], r["device"]) not in measured]
        data = {"environment": {**old["environment"], args.device: env}, "runs": kept + rows}
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
