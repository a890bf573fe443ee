"""Hostile copies of a real fixture, built at test time: the same trace with op and device names (and the folder it
lies in) replaced by names that try to become terminal escapes, rich markup, Markdown, HTML, script or mathtext.

``hostile_folder(tmp)`` copies ``fixtures/gpu/loss_item_sync`` (its host-sync finding names the ops that sync, in its
title and evidence) into a folder whose path holds ``[/x]``, ``[bold]`` and an escape character, renaming:

* ``DistributedDataParallel.forward`` (an op of host-sync's evidence) to ``EVIL``, every attack at once;
* the device (``deviceProperties[0].name``, in each rank's title) to ``BIG``, a 1 MB name;

and adds a file that is not a trace, named with markup and an escape (``BAD_FILE``): it is listed as skipped.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "loss_item_sync"

CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
OSC8 = "\x1b]8;;https://evil.example/\x1b\\click me\x1b]8;;\x1b\\"  # a terminal hyperlink
C1 = "\x9b31m"  # CSI as a single C1 byte
EVIL = (f"{CLEAR}{OSC8}{C1}\x07 [/x] [bold]bold[/bold] :smile: <script>alert(1)</script> </script>"
        "<img src=x onerror=alert(2)> ' \" & \n# heading\n- item\n| a | b |\n``` `tick` *em* _u_ $x^2$ \\ \u202e")
BIG = "aten::" + "A" * (1 << 20)  # a 1 MB op name
FOLDER_PART = "run[/x] [bold]\x1b[31m"  # two path components: "run[" and "x] [bold]\x1b[31m"

BAD_FILE = "bad[red]\x1b[2J<b>.pt.trace.json"
RENAMES = {"DistributedDataParallel.forward": EVIL}


def hostile_folder(tmp: Path) -> Path:
    """The hostile copy of the fixture under ``tmp`` (its path holds ``FOLDER_PART``)."""
    out = Path(tmp) / FOLDER_PART
    out.mkdir(parents=True)
    for src in sorted(FIXTURE.glob("*.pt.trace.json.gz")):
        trace = json.loads(gzip.decompress(src.read_bytes()))
        for e in trace["traceEvents"]:
            if e.get("name") in RENAMES:
                e["name"] = RENAMES[e["name"]]
        for dev in trace.get("deviceProperties") or []:
            dev["name"] = BIG
        (out / src.name).write_bytes(gzip.compress(json.dumps(trace).encode("utf-8"), compresslevel=1))
    (out / BAD_FILE).write_text("{not json")
    return out
