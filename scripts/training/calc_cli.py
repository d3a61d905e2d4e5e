"""What today's CLI answers for a measured step, as a user gets it: the prediction, or its one-line refusal.

The model goes to calc as the user has it, a transformers config.json in a file (`--hf-config`), and the
step as the flags a user would type. The CLI runs in-process (calc.cli.main), its stdout and stderr caught.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from calc.cli import main as cli

CONFIGS = Path(tempfile.gettempdir()) / "calc-measure-configs"  # where the users' config.json files are written


def config_file(name: str, config: dict) -> Path:
    """The config.json a user would pass to --hf-config, written to a scratch folder."""
    CONFIGS.mkdir(parents=True, exist_ok=True)
    path = CONFIGS / f"{name}.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def answer(args: list[str]) -> dict:
    """{"peak", "peak_event", "params", "trainable_params"} from `python -m calc ARGS --json`, or
    {"refused": the CLI's one-line message} where it exits with an error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli([*args, "--json"])
        except SystemExit as e:  # argparse's own errors exit
            status = e.code
    if status:
        return {"refused": err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {status}"}
    got = json.loads(out.getvalue())
    return {k: got.get(k) for k in ("peak", "peak_event", "params", "trainable_params", "rank_peaks") if k in got}


def compared(args: list[str], measured_peak: int) -> dict:
    """The CLI's answer for `args` beside the measured peak: its ratio (predicted / measured), or its refusal;
    and the command a user types."""
    got = answer(args)
    if "peak" in got:
        got["ratio"] = round(got["peak"] / measured_peak, 4)
    return {**got, "command": "python -m calc " + " ".join(_shown(a) for a in args)}


def repredict(rows: list[dict], args_of) -> None:
    """Ask the CLI again, in place, for every measured row: its "eager" and "deck" answers for the command
    `args_of(row)` builds (when calc changes; the measurements are kept)."""
    for row in rows:
        if "measured_peak" in row and "eager" in row:
            args = args_of(row)
            row["eager"] = compared(args, row["measured_peak"])
            row["deck"] = compared(deck_args(args), row["measured_peak"])


def deck_args(args: list[str]) -> list[str]:
    """The same model and step through the deck's accounting: its walk, without the eager walk's flags."""
    # each with its value
    eager_only = ("--walk", "--attention", "--device", "--engine", "--tp-plan", "--loop", "--adamw-impl", "--loss")
    drop = {i + k for i, a in enumerate(args) if a in eager_only for k in (0, 1)}
    return [a for i, a in enumerate(args) if i not in drop]


def _shown(arg: str) -> str:
    """A flag as the command shows it: a scratch config file by its name only."""
    return Path(arg).name if arg.startswith(str(CONFIGS)) else arg
