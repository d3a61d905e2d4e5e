from .cli import main

raise SystemExit(main(prog="python -m calc"))
