"""tests/load/: the suite's fixtures (tests/conftest.py) apply here too; its helpers are importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # cpu_capture, public_traces
sys.path.insert(0, str(Path(__file__).resolve().parent))  # load_helpers
