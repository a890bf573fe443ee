"""Hostile trace files built from real captures at test time: decompression bombs, sparse files, absurd numbers.

None of these is a capture: each is a real trace's text with something planted in it, named here for what was
planted. ``peak_rss`` runs a command in a fresh child and returns the largest resident set of any process it
waited for (the report and its workers), from ``resource.getrusage(RUSAGE_CHILDREN)``: memory, not timing.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

_SPACES = 1 << 20


def gzip_bomb(real: Path, dst: Path, inflated_bytes: int) -> Path:
    """HOSTILE: ``real``'s text (a gzip trace) followed by ``inflated_bytes`` of spaces (trailing whitespace is valid
    JSON), as one gzip stream that deflate packs ~1000:1. Returns ``dst``.

    Built without compressing a GiB: after a full flush deflate starts afresh, so a MiB of spaces compresses to the
    same bytes every time; the stream is those bytes repeated, with the gzip header and trailer written here.
    """
    text = gzip.decompress(real.read_bytes())
    blank = b" " * _SPACES
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(text) + c.flush(zlib.Z_FULL_FLUSH)
    spaces = c.compress(blank) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(text)
    with open(dst, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head)
        for _ in range(inflated_bytes // _SPACES):
            out.write(spaces)
            crc = zlib.crc32(blank, crc)
        out.write(c.flush(zlib.Z_FINISH))
        out.write(struct.pack("<II", crc, (len(text) + inflated_bytes // _SPACES * _SPACES) & 0xFFFFFFFF))
    return dst


def sparse_tail(real: Path, dst: Path, size: int) -> Path:
    """HOSTILE: ``real``'s text, uncompressed, then a hole up to ``size`` bytes (reads as NUL bytes, takes no disk)."""
    dst.write_bytes(gzip.decompress(real.read_bytes()) if real.name.endswith(".gz") else real.read_bytes())
    os.truncate(dst, size)
    return dst


def read_trace(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def write_trace(doc: dict, dst: Path) -> Path:
    dst.write_bytes(gzip.compress(json.dumps(doc, indent=1).encode(), 1))
    return dst


# Address space the measured command may take: a regression fails its test instead of taking the machine (a
# world size of 10^9 once took 21 GB). Reports of the test folders take well under 1 GB of it.
ADDRESS_SPACE = 4 << 30


def peak_rss(args: list[str], timeout: float = 600) -> tuple[int, subprocess.CompletedProcess]:
    """(peak resident bytes of any process ``args`` started, its completed process), measured in a fresh child so
    that nothing else this test session ran counts."""
    probe = ("import json, resource, subprocess, sys\n"
             f"cap = lambda: resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE}, {ADDRESS_SPACE}))\n"
             "p = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True, preexec_fn=cap)\n"
             "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
             "print(json.dumps([peak, p.returncode, p.stdout[-200000:], p.stderr[-20000:]]))\n")
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(args)], capture_output=True, text=True,
                         timeout=timeout, check=True)
    peak, rc, stdout, stderr = json.loads(out.stdout)
    return peak, subprocess.CompletedProcess(args, rc, stdout, stderr)


def report_cmd(folder: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "traceinspect", "report", str(folder), "--no-cache", "--width", "200", *extra]
