#!/usr/bin/env python3
"""Training memory for one device: a thin wrapper over `calc` (same as `python -m calc`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from calc.cli import main

if __name__ == "__main__":
    raise SystemExit(main(prog="memory.py"))
