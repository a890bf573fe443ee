"""The text of a trace file, whatever its compression (told by the content, not the name)."""

from __future__ import annotations

import zlib
from typing import Iterator

from ..errors import TraceFileError

try:  # ISA-L inflates gzip about twice as fast as zlib; optional.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - depends on the environment
    _zlib = zlib

READ_BYTES = 8 << 20  # compressed / raw bytes read per I/O call

_BOM = b"\xef\xbb\xbf"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_BZ2_MAGIC = b"BZh"


def iter_bytes(path: str) -> Iterator[bytes]:
    """Yield the decompressed content of a trace file in blocks, whatever the compression (told by the content).

    gzip always; bzip2 and xz with the standard library; zstd when the ``zstandard`` module is installed. A UTF-8
    byte-order mark at the start is dropped (JSON does not allow it, some Windows tools write it).
    """
    first = True
    for block in _iter_raw(path):
        if first:
            first = False
            if block.startswith(_BOM):
                block = block[len(_BOM):]
        if block:
            yield block


def _iter_raw(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        magic = f.read(6)
        f.seek(0)
        if magic[:2] == b"\x1f\x8b":
            yield from _gunzip(f, path)
            return
        if magic[:4] == _ZSTD_MAGIC or magic == _XZ_MAGIC or magic[:3] == _BZ2_MAGIC:
            yield from _decompress_other(f, magic, path)
            return
        for suffix, kind in ((".gz", "gzip"), (".zst", "zstd"), (".xz", "xz"), (".bz2", "bzip2")):
            if path.endswith(suffix):
                raise TraceFileError(path, f"named {suffix} but not a {kind} file")
        while True:
            block = f.read(READ_BYTES)
            if not block:
                return
            yield block


def _gunzip(f, path: str) -> Iterator[bytes]:
    d = _zlib.decompressobj(31)
    while True:
        block = f.read(READ_BYTES)
        if not block:
            break
        try:
            out = d.decompress(block)
            while d.unused_data:  # concatenated gzip members
                rest = d.unused_data
                out += d.flush()
                d = _zlib.decompressobj(31)
                out += d.decompress(rest)
        except zlib.error as exc:
            raise TraceFileError(path, f"corrupt gzip data ({exc})") from None
        except Exception as exc:  # isal raises its own error type
            raise TraceFileError(path, f"corrupt gzip data ({exc})") from None
        if out:
            yield out
    if not d.eof:
        raise TraceFileError(path, "truncated gzip file (the compressed stream ends early)")


def _decompress_other(f, magic: bytes, path: str) -> Iterator[bytes]:
    if magic[:4] == _ZSTD_MAGIC:
        try:
            import zstandard
        except ImportError:
            raise TraceFileError(path, "zstd-compressed: install the 'zstandard' module to read it") from None
        name, d = "zstd", zstandard.ZstdDecompressor().decompressobj()
    elif magic == _XZ_MAGIC:
        import lzma

        name, d = "xz", lzma.LZMADecompressor()
    else:
        import bz2

        name, d = "bzip2", bz2.BZ2Decompressor()
    while True:
        block = f.read(READ_BYTES)
        if not block:
            break
        try:
            out = d.decompress(block)
        except Exception as exc:  # each library has its own error type
            raise TraceFileError(path, f"corrupt {name} data ({_first_line(exc)})") from None
        if out:
            yield out
    if name != "zstd" and not d.eof:
        raise TraceFileError(path, f"truncated {name} file (the compressed stream ends early)")


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:120]
