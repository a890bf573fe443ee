"""The text of a trace file, whatever its compression (told by the content, not the name)."""

from __future__ import annotations

import functools
import os
import zlib
from typing import Iterator

from ..errors import TraceFileError
from .limits import DEFAULT_LIMITS, FinalFileError, Limits, mb, no_nul

try:  # ISA-L inflates gzip about twice as fast as zlib; optional.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - depends on the environment
    _zlib = zlib

READ_BYTES = 8 << 20  # compressed / raw bytes read per I/O call
OUT_BYTES = 8 << 20  # decompressed bytes per block handed on: inflating never runs ahead of its reader by more
# Compressed bytes fed to the inflater per call: where a gzip member ends, zlib copies the rest of what it was fed,
# so a file of thousands of tiny members costs a copy of a small feed each, not of a whole read.
_FEED = 16 << 10

_BOM = b"\xef\xbb\xbf"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_XZ_MAGIC = b"\xfd7zXZ\x00"
_BZ2_MAGIC = b"BZh"


def iter_bytes(path: str, *, limits: Limits = DEFAULT_LIMITS) -> Iterator[bytes]:
    """Yield the decompressed content of a trace file in blocks, whatever the compression (told by the content).

    gzip always; bzip2 and xz with the standard library; zstd when the ``zstandard`` module is installed. A UTF-8
    byte-order mark at the start is dropped (JSON does not allow it, some Windows tools write it). Blocks are at
    most a few MB whatever the compression ratio; a compressed file that inflates past ``limits.inflate_cap`` of
    its size, or any file holding a NUL byte, stops with a ``FinalFileError`` (load/limits.py).
    """
    first = True
    for block in _iter_raw(path, limits):
        if first:
            first = False
            if block.startswith(_BOM):
                block = block[len(_BOM):]
        if block:
            yield block


def _iter_raw(path: str, limits: Limits) -> Iterator[bytes]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        magic = f.read(6)
        f.seek(0)
        cap: int | None = limits.inflate_cap(size)
        if magic[:2] == b"\x1f\x8b":
            blocks = _gunzip(f, path)
        elif magic[:4] == _ZSTD_MAGIC or magic == _XZ_MAGIC or magic[:3] == _BZ2_MAGIC:
            blocks = _decompress_other(f, magic, path)
        else:
            for suffix, kind in ((".gz", "gzip"), (".zst", "zstd"), (".xz", "xz"), (".bz2", "bzip2")):
                if path.endswith(suffix):
                    raise TraceFileError(path, f"named {suffix} but not a {kind} file")
            blocks, cap = iter(functools.partial(f.read, READ_BYTES), b""), None
        done = 0
        for block in blocks:
            no_nul(block, done, path)
            done += len(block)
            if cap is not None and done > cap:
                raise FinalFileError(path, f"inflates past {mb(cap)}, over {limits.max_inflate_ratio:g} times its "
                                           f"{mb(size)} on disk (limit max_inflate_ratio, docs/folders.md): a "
                                           "decompression bomb, not a trace")
            yield block


def _gunzip(f, path: str) -> Iterator[bytes]:
    d = _zlib.decompressobj(31)
    pending = memoryview(b"")
    outs: list[bytes] = []
    held = 0
    while True:
        if not pending:
            block = f.read(READ_BYTES)
            if not block:
                break
            pending = memoryview(block)
        if d.eof:  # a member ended and more follows: concatenated gzip members
            d = _zlib.decompressobj(31)
        feed = pending[:_FEED]
        out = _inflate(d, feed, path)
        left = d.unused_data if d.eof else d.unconsumed_tail
        pending = pending[len(feed) - len(left):]
        if out:
            outs.append(out)
            held += len(out)
            if held >= OUT_BYTES:
                yield b"".join(outs)
                outs, held = [], 0
    while not d.eof:  # the input ended: what the inflater still holds
        out = _inflate(d, b"", path)
        if not out:
            break
        outs.append(out)
        if sum(map(len, outs)) >= OUT_BYTES:
            yield b"".join(outs)
            outs = []
    if outs:
        yield b"".join(outs)
    if not d.eof:
        raise TraceFileError(path, "truncated gzip file (the compressed stream ends early)")


def _inflate(d, data, path: str) -> bytes:
    try:
        return d.decompress(data, OUT_BYTES)
    except Exception as exc:  # zlib.error, or isal's own error type
        raise TraceFileError(path, f"corrupt gzip data ({_first_line(exc)})") from None


def _decompress_other(f, magic: bytes, path: str) -> Iterator[bytes]:
    if magic[:4] == _ZSTD_MAGIC:
        yield from _unzstd(f, path)
        return
    if magic == _XZ_MAGIC:
        import lzma

        name, d = "xz", lzma.LZMADecompressor()
    else:
        import bz2

        name, d = "bzip2", bz2.BZ2Decompressor()
    while not d.eof:
        block = f.read(READ_BYTES) if d.needs_input else b""
        if d.needs_input and not block:
            raise TraceFileError(path, f"truncated {name} file (the compressed stream ends early)")
        try:
            out = d.decompress(block, OUT_BYTES)
        except Exception as exc:  # each library has its own error type
            raise TraceFileError(path, f"corrupt {name} data ({_first_line(exc)})") from None
        if out:
            yield out


def _unzstd(f, path: str) -> Iterator[bytes]:
    try:
        import zstandard
    except ImportError:
        raise TraceFileError(path, "zstd-compressed: install the 'zstandard' module to read it") from None
    dctx = zstandard.ZstdDecompressor()
    try:
        reader = dctx.stream_reader(f, read_size=READ_BYTES, read_across_frames=True)
    except TypeError:  # zstandard before 0.16 reads one frame, as Kineto writes
        reader = dctx.stream_reader(f, read_size=READ_BYTES)
    with reader:
        while True:
            try:
                out = reader.read(OUT_BYTES)
            except zstandard.ZstdError as exc:
                raise TraceFileError(path, f"corrupt zstd data ({_first_line(exc)})") from None
            if not out:
                return
            yield out


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:120]
