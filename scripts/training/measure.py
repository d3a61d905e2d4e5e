#!/usr/bin/env python3
"""Check calc against a real PyTorch training step: values saved for backward, and peak memory.

Saved values: every tensor autograd keeps for backward inside each block of the reference Decoder
(scripts/training/reference.py), seen through torch.autograd.graph.saved_tensors_hooks, each storage
counted once, parameters and buffers left out; per sequence per block, beside Korthikanti et al.'s
formula (2022, eq. 1: sbh(34 + 5as/h) bytes at 16 bits, so half that in values).

Peak memory: one training step (forward, loss, backward, Adam step, zero_grad) after a warm-up step, so
that Adam's moments exist. On CPU the profiler (profile_memory=True) records every allocation and free
of PyTorch's CPU allocator from an empty start; the running sum of their sizes is the bytes allocated,
and its largest value during the step is the peak: the CPU counterpart of torch.cuda.max_memory_allocated;
beside it, profile_step.py's split of the matrix library's workspace (`workspace_peak`, `measured_peak_tensors`).
On CUDA: torch.cuda.max_memory_allocated. Predicted: calc.step for the same shape, sequence, micro-batch
and recomputation, recipe "fp32" with 4-byte activations (what the reference trainer runs), by both of
calc's walks: the deck's (`predicted_peak`, the default) and the eager one (`predicted_peak_eager`, what
PyTorch's eager autograd allocates, calc/eager.py).

    python scripts/training/measure.py                # a table
    python scripts/training/measure.py --json         # one JSON object
    python scripts/training/measure.py --quick        # only the runs that finish within a minute
    python scripts/training/measure.py --write        # docs/data/measurements.json (make_results.py reads it)
    python scripts/training/measure.py --device cuda --write
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import profile_step  # noqa: E402
import torch  # noqa: E402
from reference import RECOMPUTE, Config, Decoder, batch, make_optimizer, synthetic_stream, train_step  # noqa: E402
from torch._C._profiler import _EventType  # noqa: E402

import calc  # noqa: E402

MEASUREMENTS = ROOT / "docs" / "data" / "measurements.json"
RECIPE, ACTIVATION_BYTES = "fp32", 4  # the reference trainer: FP32 Adam, fp32 activations
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Run:
    """One measured configuration."""

    name: str
    config: Config  # model shape and recomputation
    seq: int  # s
    micro_batch: int  # b
    quick: bool = True  # included by --quick: a few seconds on two CPU cores

    def describe(self) -> str:
        c = self.config
        return (
            f"{c.layers} layers, width {c.width}, {c.heads} heads, feed-forward {c.ffn}, vocabulary {c.vocab}; "
            f"{self.micro_batch} sequences of {self.seq}; "
            f"{sum(p.numel() for p in Decoder(c).parameters()):,} parameters"
        )


DECODER = Config()  # calc.PRESETS["decoder"]
# 12-layer models, GPT-shaped (feed-forward 4h, as Korthikanti et al. assume), narrow enough for a CPU.
TWELVE = Config(vocab=256, context=64, layers=12, width=64, heads=4, ffn=256)
TWELVE_WIDE = Config(vocab=512, context=256, layers=12, width=128, heads=4, ffn=512)
RUNS = tuple(
    Run(name, replace(cfg, recompute=recompute), seq, micro_batch, quick)
    for name, cfg, seq, micro_batch, quick in (
        ("decoder", DECODER, 8, 16, True),
        ("12-layer", TWELVE, 64, 8, True),
        ("12-layer-wide", TWELVE_WIDE, 256, 8, False),
    )
    for recompute in RECOMPUTE
)


def shape_of(config: Config) -> calc.Shape:
    """The calc shape of a reference model: the Decoder's architecture with the config's sizes."""
    decoder = calc.PRESETS["decoder"]
    if replace(config, recompute="none") == DECODER:
        return decoder
    return decoder.replace(
        name=f"{config.layers}-layer",
        layers=config.layers,
        hidden=config.width,
        heads=config.heads,
        kv_heads=config.heads,
        ffn=config.ffn,
        vocab=config.vocab,
        context=config.context,
    )


def predict(run: Run, walk: str = "deck") -> dict:
    """calc's walk ("deck" or "eager") for the same shape, sequence, micro-batch and recomputation, in fp32."""
    return calc.step(
        shape_of(run.config),
        seq=run.seq,
        micro_batch=run.micro_batch,
        recipe=RECIPE,
        recompute=run.config.recompute,
        activation_bytes=ACTIVATION_BYTES,
        walk=walk,
    )


# --- saved values ------------------------------------------------------------------------------------

# Korthikanti et al. 2022, §4.1, one layer, in values (their bytes at 16 bits / 2; a 1-byte dropout
# mask is half a value), term by term in forward order; sbh = s*b*h, as2b = a*s*s*b, here with b = 1.
FORMULA_TERMS = (
    ("norm 1 input", "sbh"),
    ("norm 1 mean and 1/std", None),
    ("input of attn.qkv", "sbh"),
    ("Q", "sbh"),
    ("K", "sbh"),
    ("softmax output", "as2b"),
    ("softmax dropout mask", "as2b/2"),
    ("softmax dropout output", "as2b"),
    ("V", "sbh"),
    ("input of attn.proj", "sbh"),
    ("attention dropout mask", "sbh/2"),
    ("norm 2 input", "sbh"),
    ("norm 2 mean and 1/std", None),
    ("input of mlp.up", "sbh"),
    ("GELU input", "4sbh"),
    ("input of mlp.down (GELU output)", "4sbh"),
    ("MLP dropout mask", "sbh/2"),
)


def _formula_values(size: str | None, seq: int, shape: calc.Shape) -> float:
    sbh, as2b = seq * shape.hidden, shape.heads * seq * seq
    return {None: 0, "sbh": sbh, "sbh/2": sbh / 2, "4sbh": 4 * sbh, "as2b": as2b, "as2b/2": as2b / 2}[size]


def _saved_names(loss: torch.Tensor, model: Decoder) -> dict[int, str]:
    """Storage address -> what it is, read off the autograd graph: the node that saved it, and which input."""
    layer_of = {
        p.untyped_storage().data_ptr(): n.split(".", 2)[-1].removesuffix(".weight") for n, p in model.named_parameters()
    }
    nodes, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        stack.extend(f for f, _ in node.next_functions)
    names: dict[int, str] = {}
    bmm = 0
    for node in sorted(nodes, key=lambda n: n._sequence_nr()):  # forward order
        saved = {a: getattr(node, a) for a in dir(node) if a.startswith("_saved_")}
        ptr = {a: t.untyped_storage().data_ptr() for a, t in saved.items() if isinstance(t, torch.Tensor)}
        kind = node.name()
        if kind == "NativeLayerNormBackward0":
            i = layer_of[ptr["_saved_weight"]][-1]  # norm1 or norm2
            names[ptr["_saved_input"]] = f"norm {i} input"
            names[ptr["_saved_result1"]] = names[ptr["_saved_result2"]] = f"norm {i} mean and 1/std"
        elif kind == "MmBackward0":
            layer = layer_of.get(ptr["_saved_mat2"], "?")
            label = {"mlp.down": "input of mlp.down (GELU output)", "tokens": "head input"}.get(layer)
            names.setdefault(ptr["_saved_self"], label or f"input of {layer}")
        elif kind == "BmmBackward0":  # Q @ K^T, then weights @ V; each input a copy made by matmul's reshape
            first, second = ("Q", "K") if bmm % 2 == 0 else ("softmax output", "V")
            names.setdefault(ptr["_saved_self"], first)
            names.setdefault(ptr["_saved_mat2"], second)
            bmm += 1
        elif kind == "SoftmaxBackward0":
            names[ptr["_saved_result"]] = "softmax output"
        elif kind == "GeluBackward0":
            names[ptr["_saved_self"]] = "GELU input"
        else:
            for a, p in ptr.items():
                names.setdefault(p, f"{kind} {a.removeprefix('_saved_')}")
    return names


def count_saved(config: Config = DECODER, seq: int | None = None, micro_batch: int = 4) -> dict:
    """Values autograd saves for backward in each block, per sequence, each storage once.

    Parameters and buffers (a linear layer's weight, a norm's gain and bias, the causal mask) are saved
    by reference, are not activations and are left out, as the formula leaves them out."""
    seq = seq or config.context
    torch.manual_seed(0)
    model = Decoder(replace(config, recompute="none"))
    fixed = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    per_block: list[dict[int, int]] = [{} for _ in model.blocks]
    current: list[dict[int, int] | None] = [None]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if current[0] is not None and storage.data_ptr() not in fixed:
            current[0].setdefault(storage.data_ptr(), storage.nbytes() // t.element_size())
        return t

    def entering(i: int):
        def hook(module, args):
            current[0] = per_block[i]

        return hook

    def leaving(module, args, output):
        current[0] = None

    handles = [
        h
        for i, block in enumerate(model.blocks)
        for h in (block.register_forward_pre_hook(entering(i)), block.register_forward_hook(leaving))
    ]
    tokens = torch.randint(config.vocab, (micro_batch, seq), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, config.vocab), tokens.view(-1))
    for h in handles:
        h.remove()
    totals = {sum(block.values()) for block in per_block}
    if len(totals) != 1:
        raise RuntimeError(f"blocks save different amounts: {sorted(totals)}")
    names = _saved_names(loss, model)
    measured: dict[str, int] = {}
    for ptr, values in per_block[0].items():
        key = names.get(ptr, "unnamed")
        measured[key] = measured.get(key, 0) + values // micro_batch
    shape = shape_of(config)
    terms = [
        {"term": t, "measured": measured.pop(t, 0), "formula": _formula_values(size, seq, shape)}
        for t, size in FORMULA_TERMS
    ]
    terms += [{"term": t, "measured": v, "formula": 0} for t, v in measured.items()]  # anything unforeseen
    formula = calc.layer_bytes(shape, seq, 1) // 2  # bytes at 16 bits -> values
    if sum(t["formula"] for t in terms) != formula:
        raise RuntimeError("the formula's terms do not add up to calc.layer_bytes")
    return {"per_sequence_per_block": totals.pop() // micro_batch, "formula": formula, "seq": seq, "terms": terms}


# --- peak memory ---------------------------------------------------------------------------------------

# What the live bytes at the peak are, named from where each was allocated (reference.py's profiler labels).
KINDS = (
    "weights",
    "optimizer",
    "other state",
    "activations",
    "logits",
    "recomputed",
    "gradients",
    "backward working",
    "optimizer working",
)


def _names(event) -> list[str]:
    """The profiler path of an event, outermost first."""
    names = []
    while event is not None:
        names.append(event.name)
        event = event.parent
    return names[::-1]


def _is_node(name: str) -> bool:
    return name.endswith(("Backward0", "Backward1"))


def _kind(names: list[str]) -> str:
    """The kind of an allocation made during the step, from its profiler path."""
    if "optimizer" in names:
        return "optimizer working"
    nodes = [i for i, n in enumerate(names) if _is_node(n)]
    if nodes:  # a recomputation runs the model's forward inside a backward node
        inner = names[nodes[0] :]
        return "recomputed" if "block" in inner or "attention core" in inner else "backward"
    return "logits" if "head" in names or "loss" in names else "activations"


def _peak_at(names: list[str]) -> str:
    """Where the peak happened: the phase and the innermost autograd node (or op)."""
    phase = next((n for n in names if n in ("forward", "backward", "optimizer")), "?")
    nodes = [n for n in names if _is_node(n)]
    ops = [n for n in names if n.startswith("aten::")]
    where = nodes[-1] if nodes else (ops[0] if ops else "")
    return f"{phase}: {where}" + (" (recomputing)" if _kind(names) == "recomputed" else "")


def _batches(run: Run) -> list[tuple[torch.Tensor, torch.Tensor]]:
    stream = synthetic_stream(run.config.vocab, 4096, seed=0)
    gen = torch.Generator().manual_seed(0)
    return [batch(stream, run.seq, run.micro_batch, gen) for _ in range(2)]


def _make(run: Run, device: str = "cpu"):
    """make and step for profile_step's harness: the reference Decoder, its optimizer and train_step."""

    def make():
        torch.manual_seed(0)
        model = Decoder(run.config).to(device)  # all the step holds is allocated inside the measurement
        return model, make_optimizer(model)

    def step(state, xy):
        train_step(*state, *xy)  # the warm-up step: Adam creates its moments at the first step

    return make, step


def measure_cpu(run: Run) -> dict:
    """Peak bytes of PyTorch's CPU allocator over one training step, every allocation seen."""
    prof, (model, optimizer) = profile_step.profiled(profile_step.two_steps(*_make(run), _batches(run)))
    x, y = _batches(run)[1]  # the same sizes as the step's copies
    events = profile_step.events(prof)
    step = next(e for e in events if e.name == profile_step.STEP_MARK)
    backward = next(e for e in events if e.name == "backward" and e.start_time_ns >= step.start_time_ns)
    allocations = sorted((e for e in events if e.tag == _EventType.Allocation), key=lambda e: (e.start_time_ns, e.id))
    # Replay the allocator: the running sum of sizes is its total; remember who holds what.
    live: dict[int, tuple[int, str]] = {}  # address -> (bytes, kind)
    held_after_backward: set[int] = set()  # made in the backward pass and not freed in it: gradients
    running, start, end, peak, peak_live, peak_names = 0, None, None, -1, {}, []
    for e in allocations:
        size, ptr = e.extra_fields.alloc_size, e.extra_fields.ptr
        if start is None and e.start_time_ns >= step.start_time_ns:
            start = running
        running += size
        if size > 0:
            kind = "state" if start is None else _kind(_names(e.parent))
            live[ptr] = (size, kind)
            if kind == "backward":
                held_after_backward.add(ptr)
        else:
            live.pop(ptr, None)
            if e.start_time_ns <= backward.end_time_ns:
                held_after_backward.discard(ptr)
        if start is not None and e.start_time_ns <= step.end_time_ns:
            end = running
            if running > peak:
                peak, peak_live, peak_names = running, dict(live), _names(e.parent)
    state = {
        "weights": sum(p.nbytes for p in model.parameters()),
        "optimizer": sum(t.nbytes for s in optimizer.state.values() for t in s.values()),  # m, v, step
        "other state": sum(b.nbytes for b in model.buffers()) + x.nbytes + y.nbytes,  # causal masks, tokens
    }
    at_peak = dict.fromkeys(KINDS, 0) | state
    for ptr, (size, kind) in peak_live.items():
        if kind == "backward":
            kind = "gradients" if ptr in held_after_backward else "backward working"
        if kind != "state":
            at_peak[kind] += size
    split = profile_step.step_peak(prof)  # the same replay, the matrix library's workspace apart
    if (split["measured_peak"], split["measured_start"], split["measured_end"]) != (peak, start, end):
        raise RuntimeError("profile_step's replay disagrees with measure.py's")
    return {
        "measured_peak": peak,
        "measured_start": start,  # held as the step begins: weights, Adam's state, masks, tokens
        "measured_end": end,
        **{k: split[k] for k in ("workspace_peak", "workspace_at", "workspace_at_peak", "measured_peak_tensors")},
        "state_from_tensors": sum(state.values()),
        "peak_at": _peak_at(peak_names),
        "measured_at_peak": {k: v for k, v in at_peak.items() if v},
    }


def measure_cuda(run: Run) -> dict:
    """Peak bytes of the CUDA caching allocator over one training step (torch.cuda.max_memory_allocated; its
    max_memory_reserved beside it)."""
    batches = [tuple(t.cuda() for t in xy) for xy in _batches(run)]
    got, (model, optimizer) = profile_step.on_cuda(profile_step.two_steps(*_make(run, "cuda"), batches))
    x, y = batches[1]
    return {
        **got,
        "state_from_tensors": sum(p.nbytes for p in model.parameters())
        + sum(t.nbytes for s in optimizer.state.values() for t in s.values())
        + sum(b.nbytes for b in model.buffers())
        + x.nbytes
        + y.nbytes,
    }


def measure(run: Run, device: str = "cpu") -> dict:
    """One row: configuration, measured and predicted peaks, their ratio."""
    t0 = time.perf_counter()
    got = measure_cpu(run) if device == "cpu" else measure_cuda(run)
    predicted, eager = predict(run), predict(run, "eager")
    at = predicted["events"][predicted["peak_index"]]["totals"]
    return {
        "name": run.name,
        "device": device,
        "recompute": run.config.recompute,
        "configuration": {**asdict(run.config), "seq": run.seq, "micro_batch": run.micro_batch},
        **got,
        "predicted_peak": predicted["peak"],
        "predicted_start": predicted["static"],
        "predicted_peak_event": predicted["peak_event"],
        "predicted_at_peak": {k: v for k, v in at.items() if v},
        "ratio": round(predicted["peak"] / got["measured_peak"], 4),  # predicted / measured
        "predicted_peak_eager": eager["peak"],
        "predicted_peak_event_eager": eager["peak_event"],
        "ratio_eager": round(eager["peak"] / got["measured_peak"], 4),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def command(device: str) -> str:
    return f"python scripts/training/measure.py --device {device} --write"


def pending(run: Run, device: str) -> dict:
    """A row for a device this machine lacks: the prediction, and the command that measures it."""
    return {
        "name": run.name,
        "device": device,
        "recompute": run.config.recompute,
        "configuration": {**asdict(run.config), "seq": run.seq, "micro_batch": run.micro_batch},
        "measured_peak": None,
        "predicted_peak": predict(run)["peak"],
        "predicted_peak_eager": predict(run, "eager")["peak"],
        "command": command(device),
    }


def environment(device: str) -> str:
    if device == "cuda":
        return f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}"
    return f"PyTorch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads"


def notes(data: dict) -> list[str]:
    """Plain-words notes for docs/results.md; every number comes from the data."""
    sv = data["saved_values"]
    t = {row["term"]: row for row in sv["terms"]}
    ffn = sum(t[k]["formula"] - t[k]["measured"] for k in ("GELU input", "input of mlp.down (GELU output)"))
    dropout = sum(
        t[k]["formula"]
        for k in ("softmax dropout mask", "softmax dropout output", "attention dropout mask", "MLP dropout mask")
    )
    stats = sum(t[k]["measured"] for k in ("norm 1 mean and 1/std", "norm 2 mean and 1/std"))
    out = [
        f"Saved values, term by term (Decoder, sequence {sv['seq']}): the formula assumes a feed-forward layer "
        f"four times the width, the Decoder's is twice, so its GELU input and output hold {ffn:g} values fewer; "
        f"the Decoder has no dropout, which takes away the formula's three dropout masks and the softmax dropout's "
        f"output ({dropout:g} values); PyTorch also keeps each LayerNorm's mean and 1/std, one fp32 value each "
        f"per token ({stats:g} values), which the formula leaves out: "
        f"{sv['formula']:,} - {ffn:g} - {dropout:g} + {stats:g} = {sv['per_sequence_per_block']:,}. "
        "Q, K and V are kept as the copies matmul makes of the head-split views; the scale and the causal mask "
        "keep nothing per sequence.",
        "Configurations: "
        + "; ".join(
            f"`{name}`: {next(r for r in RUNS if r.name == name).describe()}"
            for name in dict.fromkeys(r["name"] for r in data["runs"])
        )
        + ".",
        "Measured: the running total of PyTorch's CPU allocator, every allocation and free recorded by the "
        "profiler from an empty start; the peak is its largest value during one training step (forward, "
        "cross-entropy, backward, Adam step, zero_grad) after a warm-up step. The step starts with the walk's "
        "weights and Adam moments plus Adam's step counters (4 bytes a tensor), the causal masks and the token "
        "batch; it ends where it started.",
    ]
    rows = [r for r in data["runs"] if r.get("measured_at_peak")]
    loss_peaks = [r for r in rows if r["peak_at"] == "backward: LogSoftmaxBackward0"]
    if loss_peaks:
        r = loss_peaks[0]
        out.append(
            f"{len(loss_peaks)} of the {len(rows)} measured steps peak in cross-entropy's backward "
            "(LogSoftmaxBackward0), holding the gradient of the fp32 log-probabilities and that of the logits, "
            f"s x b x V fp32 values each ({r['measured_at_peak'].get('backward working', 0):,} bytes the two, for "
            f"`{r['name']}` with recomputation {r['recompute']}), beside the logits and log-probabilities; the "
            "others peak inside a "
            "layer's backward, holding the gradients of its intermediate values and, with recomputation, the "
            "re-created ones. Every step also keeps the last block's output for the head's weight gradient "
            "(s x b x h values), which a per-layer count leaves out."
        )
    worst = max(rows, key=lambda r: r["ratio"], default=None)
    if worst is not None:
        meas, pred = worst["measured_at_peak"], worst["predicted_at_peak"]
        out.append(
            f"The deck walk's largest ratio, {worst['ratio']:.3f} (`{worst['name']}`, "
            f"{'no' if worst['recompute'] == 'none' else worst['recompute']} recomputation), is the activation "
            f"count: at its peak the walk holds {pred.get('activations', 0):,} bytes of activations, the real "
            f"step {meas.get('activations', 0) + meas.get('recomputed', 0):,}. Korthikanti et al. count dropout's "
            "masks and output, which these models do not have, and a feed-forward layer four times the width."
        )
    eager = max(rows, key=lambda r: abs(r["ratio_eager"] - 1), default=None)
    if eager is not None:
        unmodelled = sorted({r["measured_start"] - r["predicted_start"] for r in rows})
        with_start = [
            (r["predicted_peak_eager"] + r["measured_start"] - r["predicted_start"]) / r["measured_peak"] for r in rows
        ]
        out.append(
            "The eager walk (calc/eager.py, `--walk eager`) counts what PyTorch's eager autograd allocates: "
            "what each op saves (no dropout, LayerNorm's fp32 statistics, a feed-forward layer of any width), "
            "the head's input, cross-entropy's fp32 gradients, the gradient flowing down the residual stream, "
            "and each layer's backward working memory in autograd's order. Its ratios lie between "
            f"{min(r['ratio_eager'] for r in rows):.3f} and {max(r['ratio_eager'] for r in rows):.3f} (the "
            f"farthest: `{eager['name']}`, {eager['recompute']}). The measured step also holds, from its start, "
            "what neither walk counts: the token batch, the causal masks and Adam's step counters "
            f"({unmodelled[0]:,} to {unmodelled[-1]:,} bytes); with them added the eager ratios lie between "
            f"{min(with_start):.3f} and {max(with_start):.3f}."
        )
    if any(r["device"] == "cuda" and r["measured_peak"] is None for r in data["runs"]):
        out.append(f"CUDA rows are pending: no GPU was lent for this check; run `{command('cuda')}`.")
    return out


def results(device: str = "cpu", quick: bool = False, previous: dict | None = None) -> dict:
    """Measure the runs on one device; other devices' rows come from `previous` or stay pending."""
    runs = [r for r in RUNS if r.quick or not quick]
    measured = {(r.name, r.config.recompute): measure(r, device) for r in runs}
    old = {(r["name"], r["recompute"], r["device"]): r for r in (previous or {}).get("runs", [])}
    rows = []
    for run in RUNS:
        for dev in DEVICES:
            key = (run.name, run.config.recompute)
            if dev == device and key in measured:
                rows.append(measured[key])
            elif (*key, dev) in old and old[(*key, dev)].get("measured_peak") is not None:
                rows.append(old[(*key, dev)])
            elif dev != device:
                rows.append(pending(run, dev))
    env = dict((previous or {}).get("environment", {}))
    env[device] = environment(device)
    env.setdefault("recipe", "FP32 Adam (4 + 4 + 8 bytes a parameter), fp32 activations")
    data = {"environment": env, "saved_values": count_saved(), "runs": rows}
    data["notes"] = notes(data)
    return data


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="measure.py", description="Check calc against a real PyTorch training step.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="only the runs that finish within a minute")
    p.add_argument("--write", action="store_true", help=f"write {MEASUREMENTS.relative_to(ROOT)}")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = p.parse_args(argv)
    if args.device not in DEVICES:
        p.error(f"--device: must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this machine has no CUDA device")
    previous = json.loads(MEASUREMENTS.read_text()) if MEASUREMENTS.exists() else None
    data = results(args.device, args.quick, previous)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        sv = data["saved_values"]
        print(
            f"values saved per sequence per Decoder block: {sv['per_sequence_per_block']:,} (formula {sv['formula']:,})"
        )
        print(
            f"{'run':<26} {'device':<6} {'measured':>13} {'deck':>13} {'ratio':>6} {'eager':>13} {'ratio':>6}"
            "  measured peak at"
        )
        for r in data["runs"]:
            if r["device"] != args.device or r["measured_peak"] is None:
                continue
            print(
                f"{r['name'] + ' ' + r['recompute']:<26} {r['device']:<6} {r['measured_peak']:>13,} "
                f"{r['predicted_peak']:>13,} {r['ratio']:>6.3f} {r['predicted_peak_eager']:>13,} "
                f"{r['ratio_eager']:>6.3f}  {r.get('peak_at', '')}"
            )
    if args.write:
        MEASUREMENTS.parent.mkdir(parents=True, exist_ok=True)
        MEASUREMENTS.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
