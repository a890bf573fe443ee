"""Write (or check) traceinspect/render/evidence_units.py from the units the rules' evidence records declare.

    python scripts/evidence_units.py            # exit 1 when the file is not current
    python scripts/evidence_units.py --update   # rewrite it
"""

from __future__ import annotations

import sys
from pathlib import Path

from traceinspect.diagnose import all_rules
from traceinspect.diagnose.units import units_module, units_table

TARGET = Path(__file__).resolve().parents[1] / "traceinspect" / "render" / "evidence_units.py"


def expected() -> str:
    return units_module(units_table(all_rules()))


def main(argv: list[str]) -> int:
    text = expected()
    if "--update" in argv:
        TARGET.write_text(text)
        return 0
    if not TARGET.exists() or TARGET.read_text() != text:
        print(f"{TARGET} is not current: run python scripts/evidence_units.py --update", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
