#!/usr/bin/env python3
"""Capture everything calc answers, to prove a refactor changed no number.

For every preset x recipe x walk x recomputation, the CLI's --json (and --table --json); the planner and the
fit list at a few capacities and batches; every fine-tuning mode and optimizer; transformers configs; several
devices; rejected input; calc.web.handle for a spread of requests; the presets' catalog, the field list, the
compact form of each config; every {{ calc: }} placeholder of docs/; and docs/results.md as make_results.py
renders it. Stored compressed in tests/data/capture.json.xz.

    python scripts/capture_outputs.py           # write the capture (from the tree as it is)
    python scripts/capture_outputs.py --check   # compare byte for byte; name the first difference, exit 1
    python scripts/capture_outputs.py --check --fast   # the quick subset tests/scripts/test_capture.py runs
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import lzma
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAPTURE = ROOT / "tests" / "data" / "capture.json.xz"
HF_CONFIGS = ROOT / "tests" / "hf_configs"
# The presets as they stood when the capture was first taken: presets added later add no case here.
PRESETS = ("llama-7b", "decoder", "gpt2", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
           "llama-3.1-405b", "llama-3.2-1b", "llama-3.2-3b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b",
           "qwen2.5-72b", "gemma-2-9b", "gpt-3-175b")
RECIPES = ("mixed", "fp32", "fp32-full", "autocast", "megatron", "bf16")
RECOMPUTE = ("none", "selective", "full")
OPTIMIZERS = ("adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion")
FAST_PRESETS = ("decoder", "gpt2", "llama-3.2-1b")  # the test's subset
TUNED = ("llama-7b", "llama-3.2-1b", "mistral-7b", "qwen2.5-7b", "gpt2", "decoder")

Case = tuple[str, Callable[[], str], bool]  # key, what it answers (text), in the fast subset
WHOLE = 200_000  # characters: a longer answer (an eager walk's events) is stored as hashes of its line chunks
CHUNK = 2000  # lines a hash covers


def cli(*argv: str) -> str:
    """What `python -m calc ARGV` prints (stdout, then stderr) and its exit status."""
    from calc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv), prog="calc")
        except SystemExit as e:  # argparse's own errors
            rc = e.code
    return f"rc {rc}\n{out.getvalue()}--- stderr\n{err.getvalue()}"


def cli_cases() -> Iterator[Case]:
    for preset in PRESETS:
        fast = preset in FAST_PRESETS
        yield f"cli --preset {preset} --table --json", lambda p=preset: cli("--preset", p, "--table", "--json"), fast
        yield f"cli --preset {preset}", lambda p=preset: cli("--preset", p), fast
        for recipe in RECIPES:
            for recompute in RECOMPUTE:
                for walk in ("deck", "eager"):
                    argv = ("--preset", preset, "--recipe", recipe, "--recompute", recompute, "--walk", walk)
                    yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), fast
        for attention in ("sdpa", "eager"):
            for device in ("cuda", "cpu"):
                argv = ("--preset", preset, "--walk", "eager", "--attention", attention, "--device", device,
                        "--recipe", "autocast")
                yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), fast
    for argv in (
        ("--preset", "decoder", "--events"),
        ("--preset", "decoder", "--walk", "eager", "--events"),
        ("--preset", "llama-7b", "--seq", "2048", "--micro-batch", "4", "--json"),
        ("--preset", "gpt2", "--seq", "512", "--micro-batch", "8", "--walk", "eager", "--json"),
        ("--preset", "llama-3.2-1b", "--seq", "256", "--micro-batch", "2", "--walk", "eager", "--json"),
        ("--preset", "mixtral-8x7b", "--capacity-factor", "1.25", "--json"),
        ("--preset", "mixtral-8x7b", "--seq", "512", "--walk", "eager", "--device", "cpu", "--json"),
    ):
        yield "cli " + " ".join(argv), lambda a=argv: cli(*a), True


def plan_cases() -> Iterator[Case]:
    for preset in PRESETS:
        fast = preset in FAST_PRESETS
        for capacity in ("24", "80", "141"):
            for batch in ("64", "1024"):
                argv = ("--preset", preset, "--plan", "--json", "--capacity-gb", capacity, "--global-batch", batch)
                yield "cli " + " ".join(argv), lambda a=argv: cli(*a), fast
        for capacity in ("16", "80"):
            argv = ("--preset", preset, "--fit-card", "--json", "--capacity-gb", capacity)
            yield "cli " + " ".join(argv), lambda a=argv: cli(*a), fast
    for argv in (
        ("--preset", "llama-7b", "--plan", "--capacity-gb", "40", "--sequence-parallel", "--flash"),
        ("--preset", "llama-7b", "--plan", "--json", "--recipe", "megatron", "--seq", "8192"),
        ("--preset", "llama-7b", "--fit-card", "--card", "rtx-4090"),
        ("--preset", "llama-3.1-8b", "--fit-card", "--json", "--card", "rtx-3090", "--optimizer", "adamw-8bit"),
        ("--preset", "llama-3.1-8b", "--fit-card", "--json", "--card", "a100-40gb", "--paged-optimizer", "--flash"),
        ("--preset", "mixtral-8x7b", "--plan", "--json", "--capacity-gb", "80"),
    ):
        yield "cli " + " ".join(argv), lambda a=argv: cli(*a), True


def tuning_cases() -> Iterator[Case]:
    modes = (
        ("--finetune", "lora"),
        ("--finetune", "lora", "--lora-rank", "64", "--lora-targets", "all-linear"),
        ("--finetune", "lora", "--lora-targets", "q,k,v,o"),
        ("--finetune", "qlora"),
        ("--finetune", "qlora", "--lora-rank", "16", "--lora-targets", "all-linear"),
        ("--finetune", "freeze", "--freeze-layers", "1"),
        ("--finetune", "full", "--optimizer", "sgd"),
    )
    for preset in TUNED:
        fast = preset in FAST_PRESETS
        for mode in modes:
            for recipe in ("mixed", "autocast", "bf16"):
                for recompute in ("none", "full"):
                    for walk in ("deck", "eager"):
                        argv = ("--preset", preset, *mode, "--recipe", recipe, "--recompute", recompute,
                                "--walk", walk, "--seq", "512")
                        yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), fast
        for optimizer in OPTIMIZERS:
            for paged in ((), ("--paged-optimizer",)):
                argv = ("--preset", preset, "--finetune", "lora", "--optimizer", optimizer, *paged)
                yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), fast
        argv = ("--preset", preset, "--finetune", "qlora", "--lora-rank", "16")
        yield "cli " + " ".join(argv), lambda a=argv: cli(*a), fast


def config_cases() -> Iterator[Case]:
    for path in sorted(HF_CONFIGS.glob("*.json")):
        for walk in ("deck", "eager"):
            for recompute in ("none", "full"):
                argv = ("--hf-config", str(path.relative_to(ROOT)), "--walk", walk, "--recompute", recompute,
                        "--seq", "1024", "--device", "cpu")
                yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), True
        argv = ("--hf-config", str(path.relative_to(ROOT)), "--finetune", "lora", "--walk", "eager", "--seq", "256")
        yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), True


def parallel_cases() -> Iterator[Case]:
    layouts = (
        ("--dp", "8", "--zero", "1"),
        ("--dp", "8", "--zero", "3"),
        ("--dp", "4", "--zero", "2", "--grad-accum", "4"),
        ("--tp", "8", "--sequence-parallel"),
        ("--tp", "4", "--pp", "4", "--flash"),
        ("--tp", "2", "--pp", "2", "--dp", "2", "--zero", "1", "--grad-accum", "8"),
        ("--pp", "8", "--recompute", "full"),
        ("--pp", "4", "--pp-schedule", "1f1b", "--grad-accum", "8"),
    )
    for preset in ("llama-7b", "llama-2-70b", "gpt-3-175b", "mixtral-8x7b", "gpt2"):
        for layout in layouts:
            argv = ("--preset", preset, *layout)
            yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), preset in FAST_PRESETS
            yield "cli " + " ".join(argv) + " --table --json", lambda a=argv: cli(*a, "--table", "--json"), False
    for argv in (("--preset", "mixtral-8x7b", "--dp", "8", "--ep", "8"),
                 ("--preset", "mixtral-8x7b", "--dp", "8", "--ep", "4", "--zero", "3", "--tp", "2")):
        yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), True
    for schedule in ("1f1b", "gpipe", "interleaved-1f1b"):  # the eager walk's pipeline (calc.engines.pipeline)
        argv = ("--preset", "qwen3-8b", "--walk", "eager", "--pp", "4", "--pp-schedule", schedule, "--grad-accum",
                "8", "--recipe", "autocast", "--device", "cpu")  # fmt: skip
        yield "cli " + " ".join(argv), lambda a=argv: cli(*a), False
    for plan in ("layers", "transformers"):  # the eager walk's tensor parallelism, either plan (calc.engines.tensor)
        argv = ("--preset", "qwen3-8b", "--walk", "eager", "--tp", "4", "--tp-plan", plan, "--recipe", "autocast",
                "--device", "cpu")  # fmt: skip
        yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), False


def custom_cases() -> Iterator[Case]:
    shapes = (
        ("--layers", "12", "--hidden", "768", "--heads", "12", "--kv-heads", "4", "--ffn", "3072", "--vocab",
         "50257", "--norm", "layer", "--positions", "learned", "--context", "2048", "--tied", "--no-gated-ffn",
         "--bias", "--seq", "1024"),
        ("--preset", "llama-7b", "--experts", "8", "--experts-per-token", "2", "--seq", "1024"),
        ("--preset", "mixtral-8x7b", "--experts", "0"),
        ("--preset", "llama-3.2-1b", "--head-size", "128", "--sliding-window", "512", "--seq", "2048"),
        ("--preset", "qwen2.5-7b", "--qkv-bias", "--no-tied", "--norms-per-layer", "3"),
        ("--preset", "gpt2", "--family", "llama", "--activation", "silu"),
        ("--preset", "llama-7b", "--experts", "16", "--experts-per-token", "4", "--expert-ffn", "1024",
         "--shared-expert-ffn", "4096", "--shared-expert-gate", "--dense-layers", "2"),
        ("--preset", "llama-7b", "--layers", "4", "--hidden", "256", "--heads", "4", "--ffn", "512", "--vocab",
         "1000", "--walk", "eager", "--device", "cpu", "--seq", "128"),
        ("--preset", "llama-7b", "--dropout", "--head-bias", "--no-final-norm"),
    )
    for argv in shapes:
        yield "cli " + " ".join(argv) + " --json", lambda a=argv: cli(*a, "--json"), True
    bad = (
        ("--heads", "33"), ("--seq", "-1"), ("--preset", "nope"), ("--seq", "1e9"), ("--layers", "abc"),
        ("--preset", "gpt2", "--seq", "4096"), ("--walk", "eager", "--dp", "2"), ("--walk", "eager", "--preset",
        "gemma-2-9b"), ("--walk", "eager", "--recompute", "selective"), ("--finetune", "lora", "--tp", "2"),
        ("--lora-rank", "8"), ("--freeze-layers", "2"), ("--lora-targets", "x", "--finetune", "lora"),
        ("--card", "h100-80gb", "--capacity-gb", "80"), ("--hf-config", "/nonexistent.json"),
        ("--preset", "mixtral-8x7b", "--fit-card"), ("--finetune", "lora", "--plan"), ("--walk", "eager", "--plan"),
        ("--zero", "4"), ("--capacity-gb", "0"), ("--kv-heads", "5"), ("--experts-per-token", "2"),
        ("--preset", "gpt2", "--kv-heads", "4"), ("--tp", "3"), ("--nonsense",),
        ("--preset", "mixtral-8x7b", "--walk", "eager", "--capacity-factor", "1.5"),
        ("--preset", "mixtral-8x7b", "--finetune", "lora", "--walk", "eager"),
        ("--finetune", "lora", "--optimizer", "sgd", "--walk", "eager"),
    )
    for argv in bad:
        yield "cli " + " ".join(argv), lambda a=argv: cli(*a), True


def web_requests() -> list[dict | str]:
    asks: list[dict | str] = [{}]
    asks += [{"inputs": {"preset": name}, "sweep": True, "plan": True, "fit": True} for name in PRESETS]
    asks += [{"inputs": {"recipe": r, "recompute": c}, "sweep": True} for r in RECIPES for c in RECOMPUTE]
    asks += [{"inputs": {"walk": w, "preset": p}, "sweep": False} for w in ("deck", "eager") for p in PRESETS]
    asks += [
        {"inputs": {"seq": "3000", "finetune": "lora"}, "sweep": True, "numbers": False},
        {"inputs": {"finetune": "qlora", "lora-rank": "16", "lora-targets": "all-linear"}, "sweep": True, "fit": True},
        {"inputs": {"finetune": "freeze", "freeze-layers": "8", "optimizer": "lion"}, "sweep": True},
        {"inputs": {"preset": "llama-3.2-1b", "finetune": "lora", "walk": "eager", "device": "cpu"}},
        {"inputs": {"dp": "8", "tp": "2", "pp": "2", "zero": "1", "sequence-parallel": "true", "flash": "true",
                    "grad-accum": "4", "global-batch": "512", "capacity-gb": "40"}, "plan": True},
        {"inputs": {"layers": "12", "hidden": "768", "heads": "12", "kv-heads": "4", "ffn": "3072", "vocab": "50257",
                    "seq": "1,024", "micro-batch": "8", "norm": "layer", "positions": "learned", "context": "2048",
                    "tied": "true", "gated-ffn": "false", "bias": "true"}, "sweep": True, "plan": True},
        {"inputs": {"preset": "mixtral-8x7b", "ep": "4", "dp": "8"}, "plan": True},
        {"inputs": {"card": "rtx-4090", "preset": "llama-3.1-8b"}, "fit": True, "sweep": False},
        {"inputs": {"heads": "33"}}, {"inputs": {"seq": "-1"}}, {"inputs": {"preset": "nope"}},
        {"inputs": {"walk": "eager", "dp": "2"}}, {"inputs": {"lora-rank": "4"}}, {"inputs": []},
        "not json", "[1, 2]",
    ]
    for path in sorted(HF_CONFIGS.glob("*.json")):
        for walk in ("deck", "eager"):
            asks.append({"inputs": {"hf-config": path.read_text(), "walk": walk}, "sweep": True})
    return asks


def web_cases() -> Iterator[Case]:
    for i, ask in enumerate(web_requests()):
        request = ask if isinstance(ask, str) else json.dumps(ask, sort_keys=True)
        short = request if len(request) < 160 else f"{request[:150]}... #{i}"

        def answer(r=request) -> str:
            from calc.web import handle

            return handle(r)

        inputs = ask.get("inputs") if isinstance(ask, dict) else None
        yield f"web {short}", answer, i < 4 or (isinstance(inputs, dict) and inputs.get("preset") == "gpt2")


def data_cases() -> Iterator[Case]:
    def catalog() -> str:
        from calc.presets import catalog

        return json.dumps([row for row in catalog() if row["name"] in PRESETS], indent=1)

    def fields() -> str:
        from calc.inputs import FIELDS

        return json.dumps(list(FIELDS))

    def compacts() -> str:
        from calc.hf import compact, parse
        from calc.presets import CONFIG_PRESETS, config_text

        texts = {p.name: p.read_text() for p in sorted(HF_CONFIGS.glob("*.json"))}
        texts.update({name: config_text(name) for name in CONFIG_PRESETS if name in PRESETS})
        return json.dumps({name: compact(parse(text)) for name, text in texts.items()}, indent=1)

    def results() -> str:
        sys.path.insert(0, str(ROOT / "scripts"))
        import make_results

        return make_results.render()

    yield "catalog", catalog, True
    yield "fields", fields, True
    yield "compact", compacts, True
    yield "docs/results.md", results, False
    yield "placeholders", placeholders, False


def placeholders() -> str:
    """Every {{ calc: }} placeholder of docs/ as hooks/placeholders.py resolves it, one a line."""
    sys.path.insert(0, str(ROOT / "hooks"))
    import placeholders as hook

    specs = sorted({m.group(1) for p in (ROOT / "docs").rglob("*.md") for m in hook.PLACEHOLDER.finditer(p.read_text())
                    if m.group(1).startswith("calc:")})
    return "\n".join(f"{spec} -> {hook.resolve(spec)}" for spec in specs) + "\n"


def cases() -> list[Case]:
    return [*cli_cases(), *plan_cases(), *tuning_cases(), *config_cases(), *parallel_cases(), *custom_cases(),
            *web_cases(), *data_cases()]


def stored_form(text: str) -> str | dict:
    """An answer as the capture keeps it: whole, or, past WHOLE characters, its length and one sha256 a chunk
    of CHUNK lines (so a difference is still placed within CHUNK lines)."""
    if len(text) <= WHOLE:
        return text
    lines = text.splitlines(keepends=True)
    chunks = ["".join(lines[i : i + CHUNK]) for i in range(0, len(lines), CHUNK)]
    hashes = [hashlib.sha256(c.encode()).hexdigest()[:16] for c in chunks]  # 64 bits: enough to tell a change
    return {"chars": len(text), "lines": len(lines), "sha256": hashes}


def first_difference(key: str, old: str | dict, new: str) -> str:
    """Where `new` first differs from `old`: the line number and both lines, cut short (for an answer kept as
    hashes, the first chunk of lines that differs)."""
    if isinstance(old, dict):
        fresh = stored_form(new)
        if not isinstance(fresh, dict):
            return f"{key}: {old['chars']:,} characters before, {len(new):,} now"
        for i, (a, b) in enumerate(zip(old["sha256"], fresh["sha256"], strict=False)):
            if a != b:
                start = new.splitlines()[i * CHUNK]
                return f"{key}: lines {i * CHUNK + 1} to {(i + 1) * CHUNK} differ (now from: {start!r})"
        return f"{key}: {old['lines']} lines before, {fresh['lines']} now"
    old_lines, new_lines = old.splitlines(), new.splitlines()
    for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)):
        if a != b:
            col = next(j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y) if a[: len(b)] != b[: len(a)] \
                else min(len(a), len(b))
            lo = max(0, col - 60)
            return f"{key}: line {i + 1}, column {col + 1}:\n  was: {a[lo:col + 100]!r}\n  now: {b[lo:col + 100]!r}"
    return f"{key}: {len(old_lines)} lines before, {len(new_lines)} now (the same up to the shorter)"


def check(stored: dict[str, str], chosen: list[Case]) -> int:
    differences = 0
    for key, answer, _ in chosen:
        if key not in stored:
            print(f"{key}: not in the capture (a new case: run without --check to take it)", file=sys.stderr)
            differences += 1
            continue
        new = answer()
        if stored_form(new) != stored[key]:
            if not differences:
                print(first_difference(key, stored[key], new), file=sys.stderr)
            differences += 1
    if differences:
        print(f"{differences} of {len(chosen)} answers differ from {CAPTURE.relative_to(ROOT)}", file=sys.stderr)
        return 1
    print(f"all {len(chosen)} answers equal the capture", file=sys.stderr)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare with the stored capture; exit 1 on a difference")
    p.add_argument("--fast", action="store_true", help="with --check: only the quick subset")
    p.add_argument("--only", metavar="REGEX", help="with --check: only the cases whose key matches")
    args = p.parse_args()
    chosen = cases()
    keys = [key for key, _, _ in chosen]
    if len(set(keys)) != len(keys):
        raise SystemExit("two cases share a key")
    if args.check:
        stored = json.loads(lzma.decompress(CAPTURE.read_bytes()))
        if args.fast:
            chosen = [c for c in chosen if c[2]]
        if args.only:
            chosen = [c for c in chosen if re.search(args.only, c[0])]
        return check(stored, chosen)
    capture = {key: stored_form(answer()) for key, answer, _ in chosen}
    CAPTURE.parent.mkdir(parents=True, exist_ok=True)
    CAPTURE.write_bytes(lzma.compress(json.dumps(capture, sort_keys=True, indent=0).encode(), preset=3))
    print(f"{len(capture)} answers written to {CAPTURE.relative_to(ROOT)} ({CAPTURE.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
