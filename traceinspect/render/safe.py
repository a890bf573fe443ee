"""Text read from a trace, made safe to show: every renderer passes names, paths and messages through here.

A trace is data from someone else's machine: an op, kernel or device name, a file or folder name, an error message
may hold anything. Before any renderer lays a string out in its own markup, it is made *plain and bounded* here:

* ``visible``: control characters (C0, DEL, C1) and the bidirectional overrides are written as visible escapes
  (``\\x1b``, ``\\n``, ``\\u202e``), so no clear-screen, cursor move, OSC-8 hyperlink or line break reaches a
  terminal, a Markdown line or a table row from a name;
* ``words``: each run of characters without a space longer than ``NAME_WIDTH`` (80) is shortened to its first 79
  characters and ``…``, and the whole text to ``LINE_WIDTH`` (240) characters: a title or a table cell stays readable
  whatever the names in it (the JSON report keeps every name whole);
* ``path``: a file or folder name, its control characters made visible, at most ``PATH_WIDTH`` characters;
* ``one_line``: a message that may span lines (an exception's), its white space runs one space, then as ``path``.

The markup of each output is then escaped by its renderer: rich ``Text`` objects (never markup) for the terminal,
``markdown``'s escapes for Markdown and TensorBoard, jinja2's autoescape for HTML, ``plot_text`` for matplotlib.
"""

from __future__ import annotations

import re

NAME_WIDTH = 80  # a name (a run without spaces) longer than this is shown as its first 79 characters and "…"
LINE_WIDTH = 240  # a title, a line or a table cell of the report longer than this is cut, with "…"
VALUE_WIDTH = 1000  # an evidence value (a list of names and numbers) longer than this is cut, with "…"
PATH_WIDTH = 1024  # a path or a one-line message (Linux allows 4096 bytes; no real one is this long)
ELLIPSIS = "\u2026"

_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_VISIBLE = {c: _NAMED.get(c, f"\\x{c:02x}") for c in [*range(0x20), *range(0x7F, 0xA0)]}
_VISIBLE.update({c: f"\\u{c:04x}" for c in _BIDI})
_LONG_WORD = re.compile(r"\S{%d,}" % (NAME_WIDTH + 1))


def visible(text) -> str:
    """``text`` with every control character written as a visible escape (``\\x1b``, ``\\n``)."""
    return ("" if text is None else str(text)).translate(_VISIBLE)


def clip(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` characters, the last one ``…`` when it was cut."""
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


def name(text, width: int = NAME_WIDTH) -> str:
    """One name as shown in a title or a table cell: visible, at most ``width`` characters."""
    return clip(visible(text), width)


def words(text, width: int = LINE_WIDTH) -> str:
    """A line of the report (a title, a note, an evidence value): visible, each name in it at most ``NAME_WIDTH``
    characters, the whole at most ``width``."""
    s = visible(text)
    if len(s) > width * 4:  # a huge text: cut first, so a 1 MB name costs no more than a short one
        s = s[: width * 4]
    return clip(_LONG_WORD.sub(lambda m: clip(m.group(0), NAME_WIDTH), s), width)


def path(text) -> str:
    """A file or folder name, or a one-line message naming one: visible, at most ``PATH_WIDTH`` characters."""
    return clip(visible(text), PATH_WIDTH)


def one_line(text, width: int = PATH_WIDTH) -> str:
    """A message that may span lines (an exception's): its runs of white space one space, control characters
    visible, at most ``width`` characters."""
    return clip(visible(" ".join(("" if text is None else str(text)).split())), width)


def lines(text, limit: int = 60, width: int = LINE_WIDTH, code: bool = False) -> list[str]:
    """A block of several lines (a fix): each line through ``words``, at most ``limit`` lines. ``code``: the names in
    a line are kept whole (a shortened name is no longer code), only the line is bounded to ``width``."""
    text = "" if text is None else str(text)
    out = [clip(visible(x[: width * 4]), width) if code else words(x, width) for x in text.splitlines()]
    if len(out) > limit:
        out = out[:limit] + [f"... ({len(out) - limit} more lines in the JSON report)"]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Markdown (the Markdown report and TensorBoard's Text tab)

# CommonMark's rules (https://spec.commonmark.org/0.31.2/): a backslash escapes ASCII punctuation only (before a
# digit or a letter it is a literal backslash), so only characters that could start markup get one.
_MD_INLINE = re.compile(r"[\\`*\[\]|~]|(?<![^\W_])_|_(?![^\W_])")  # "_" inside a word opens no emphasis
_MD_HTML = {"&": "&amp;", "<": "&lt;"}  # ">" is only markup after "<" or at the start of a line
# A block marker at the start of a line: a heading, a list item, a quote, a setext underline or thematic break, an
# ordered list item (its "." or ")" is escaped: "67.1 MB" or "12 ms" starts nothing and keeps no backslash).
_MD_BLOCK = re.compile(r"^(\s*)(#{1,6}(?=[ \t]|$)|[-+](?=[ \t]|$)|>|=+\s*$|-[\s-]*$|\d{1,9}[.)](?=[ \t]|$))")


def _inert_block(m: re.Match) -> str:
    lead, mark = m.group(1), m.group(2)
    return lead + (mark[:-1] + "\\" + mark[-1] if mark[0].isdigit() else "\\" + mark)


def markdown(text, cell: bool = False) -> str:
    """Plain text as Markdown that shows it literally, to CommonMark's rules (and GitHub's tables and
    strikethrough): HTML written as entities; emphasis, links, code, strikethrough and table pipes backslash-escaped;
    a block marker at the start (``#``, ``-``, ``1.``, ``>``, ``===``) made inert with one backslash before its
    punctuation. No backslash before a digit or a letter (it would show). ``cell``: a table cell, where no block
    starts. Apply after ``words``."""
    s = _MD_INLINE.sub(lambda m: "\\" + m.group(0), visible(text))
    s = "".join(_MD_HTML.get(ch, ch) for ch in s)
    return s if cell else _MD_BLOCK.sub(_inert_block, s)


def code_span(text) -> str:
    """Plain text as a Markdown code span: fenced by one more backtick than its longest run of backticks."""
    s = visible(text)
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ") and s.strip()) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def code_fence(body_lines: list[str], lang: str = "") -> list[str]:
    """Lines as a fenced Markdown code block whose fence no line of it can close."""
    longest = max((len(r) for x in body_lines for r in re.findall(r"`{3,}", x)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + lang, *body_lines, fence]


def plot_text(text, width: int = NAME_WIDTH) -> str:
    """A name as a matplotlib label: visible, at most ``width`` characters, ``$`` escaped (no mathtext)."""
    return name(text, width).replace("$", r"\$")
