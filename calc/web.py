"""The browser's entry point: JSON in, JSON out, never an exception."""

from __future__ import annotations

import json

from .api import step, sweep, table
from .inputs import MAX_BYTES, InputError, parse_inputs, size_bound
from .plan import plan
from .units import format_gb, format_gib, format_size

SWEEP_POINTS = 200


def _display(n: int) -> dict[str, str]:
    return {"gb": format_gb(n), "gib": format_gib(n), "text": format_size(n)}


def seq_grid(seq: int, points: int = SWEEP_POINTS) -> list[int]:
    """Sequence lengths from 1/8 to 2x the chosen one (and the chosen one), for the peak-versus-sequence chart."""
    lo, hi = max(1, seq // 8), seq * 2
    return sorted({seq} | {lo + (hi - lo) * i // (points - 1) for i in range(points)})


def compute(inputs: dict, want_sweep: bool = True, want_plan: bool = False) -> dict:
    """Everything the page draws for one set of validated inputs."""
    shape, seq, b, par = inputs["shape"], inputs["seq"], inputs["micro_batch"], inputs["par"]
    accum = inputs["grad_accum"]
    rows = table(shape, seq, b, par, accum)
    for row in rows:
        row["display"] = {part: _display(v) for part, v in {**row["bytes"], "peak": row["peak"]}.items()}
    result = {
        "ok": True,
        "step": step(
            shape, seq, b, inputs["recipe"], inputs["recompute"], par=par, walk=inputs["walk"], grad_accum=accum
        ),
        "table": rows,
        "capacity": inputs["capacity"],
        "global_batch": inputs["global_batch"],
    }
    result["fits"] = result["step"]["peak"] <= inputs["capacity"]
    if want_plan:
        result["plan"] = plan(
            shape, seq, inputs["global_batch"], inputs["capacity"], inputs["recipe"], par.sequence_parallel, par.flash
        )
        for row in result["plan"]:
            row["display"] = {"peak": format_gb(row["peak"]), "extra_compute": f"{row['extra_compute']:.1%}"}
    if want_sweep:
        seqs = seq_grid(seq)
        if shape.positions == "learned":
            seqs = [s for s in seqs if s <= shape.context]
        # Up to 2x the chosen sequence, where every byte count stays exact in a browser (< 2^53).
        seqs = [s for s in seqs if s <= seq or size_bound(shape, s, b, par) <= MAX_BYTES]
        result["sweep"] = {
            "seq": seqs,
            "peaks": {row["id"]: sweep(shape, seqs, b, row["recipe"], row["recompute"], par, accum) for row in rows},
        }
    return result


def handle(request: str) -> str:
    """{"inputs": {field: value}, "sweep": bool, "plan": bool} -> {"ok": true, ...} or
    {"ok": false, "field", "message"}."""
    try:
        payload = json.loads(request)
        if not isinstance(payload, dict) or not isinstance(payload.get("inputs", {}), dict):
            return json.dumps({"ok": False, "field": None, "message": "the request must be a JSON object of inputs"})
        inputs = parse_inputs(payload.get("inputs", {}))
        return json.dumps(compute(inputs, payload.get("sweep", True), payload.get("plan", False)))
    except InputError as e:
        return json.dumps({"ok": False, "field": e.field, "message": e.message})
    except Exception as e:  # the page must keep working whatever arrives
        return json.dumps({"ok": False, "field": None, "message": f"{type(e).__name__}: {e}"})
