import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import settings  # noqa: E402

# Timing is not what these properties test: a busy 2-core CI machine must not fail them on a deadline.
settings.register_profile("ci", deadline=None)
settings.load_profile("ci")
