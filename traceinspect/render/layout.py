"""Laying text out in a width (the terminal's): prose wrapped at spaces with a hanging indent, code broken only
where Python allows it, a wide table split into groups of columns. Pure functions over strings; the terminal
renderers print what they return. Widths are counted in terminal cells (``rich.cells.cell_len``).

Code (a finding's fix) is never wrapped mid-token: a line longer than the width is broken, in order, by

1. moving a trailing comment onto its own lines below the code (a comment line is valid anywhere: inside open
   brackets it starts where their next line does), its words wrapped as ``# ...`` lines;
2. breaking the code after a comma or an opening bracket inside brackets (Python's implicit line joining), the rest
   indented under the bracket, or 4 columns in when that is too far right (a line that continues brackets opened
   above, and starts past half the width, is moved 4 columns in from its statement first);

and a line with no such point (a long string, a long name) is printed whole, longer than the width: the terminal
then wraps it for display, and a copy of it is still the code as written.
"""

from __future__ import annotations

import re

from rich.cells import cell_len

# A word, with the units that follow its number ("100 %", "0.1 ms", "67.1 MB/step"): a line never starts with a unit.
_WORD = re.compile(r"\S+(?: (?:%|[mu]?s|[KMGT]?i?B|GB/s)(?:/\w+)?[),;:.]*(?=\s|$))*")
_OPEN, _CLOSE = "([{", ")]}"


def _fitting(s: str, cells: int) -> int:
    """How many leading characters of ``s`` fit in ``cells`` (at least 1)."""
    n = 0
    for i, ch in enumerate(s):
        n += cell_len(ch)
        if n > cells:
            return max(i, 1)
    return len(s)


def breaks(s: str, first: int, rest: int) -> list[int]:
    """Where to cut ``s`` so that its first line has at most ``first`` cells and the others at most ``rest``:
    before a word that does not fit, or inside a word longer than a whole line."""
    cuts, start, limit = [], 0, max(first, 1)
    for m in _WORD.finditer(s):
        a, b = m.span()
        while cell_len(s[start:b]) > limit:
            cut = a if a > start and s[start:a].strip() else start + _fitting(s[start:b], limit)
            cuts.append(cut)
            start, limit = cut, max(rest, 1)
    return cuts


def wrap(s: str, width: int, indent: int = 0, hang: int = 0) -> list[str]:
    """``s`` as lines of at most ``width`` cells: the first indented ``indent`` spaces, the others ``indent + hang``."""
    first, rest = width - indent, width - indent - hang
    cuts = [0, *breaks(s, first, rest), len(s)]
    parts = [s[a:b].rstrip() for a, b in zip(cuts, cuts[1:])]
    return [" " * (indent if i == 0 else indent + hang) + (p if i == 0 else p.lstrip()) for i, p in enumerate(parts)]


def _scan(line: str, depth: int) -> tuple[int | None, list[tuple[int, int]], int, list[int]]:
    """(where a comment starts, [(offset after a safe break point, depth there)], depth at the end, columns after
    the brackets this line leaves open) of one line of Python, given the bracket depth before it. Strings are
    skipped: nothing inside one is a break point, a bracket or a comment."""
    comment, points, opens, quote, i = None, [], [], None, 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif line.startswith(quote, i):
                i += len(quote) - 1
                quote = None
        elif ch in "\"'":
            quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else ch
            i += len(quote) - 1
        elif ch == "#":
            comment = i
            break
        elif ch in _OPEN:
            depth += 1
            opens.append(i + 1)
            points.append((i + 1, depth))
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
            opens = opens[:-1]
        elif ch == "," and depth > 0:
            points.append((i + 1, depth))
        i += 1
    return comment, points, depth, opens


def _comment_lines(text: str, indent: str, width: int) -> list[str]:
    body = text.lstrip("#").strip()
    return [indent + "# " + x for x in wrap(body, width - len(indent) - 2)] if body else [indent + "#"]


def _break_code(code: str, depth: int, width: int) -> list[str]:
    """One line of code (no comment) broken after commas or opening brackets inside brackets, to fit ``width``;
    the rest under the innermost bracket this line opened, else where the line itself starts when it continues
    brackets of a line above, else 4 columns in (and 4 columns in where the bracket is past half the width)."""
    out, inside = [], depth > 0
    while cell_len(code) > width:
        points = _scan(code, depth)[1]
        fits = [p for p, d in points if d > 0 and cell_len(code[:p].rstrip()) <= width and code[p:].strip()]
        if not fits:
            break
        at = fits[-1]
        _, _, depth, opens = _scan(code[:at], depth)
        indent = len(code) - len(code.lstrip())
        hang = opens[-1] if opens and opens[-1] <= width // 2 else indent + (0 if inside and not opens else 4)
        out.append(code[:at].rstrip())
        code, inside = " " * hang + code[at:].lstrip(), True
    return out + [code]


def code(lines: list[str], width: int) -> list[str]:
    """Lines of Python laid out in ``width`` without changing what they mean (see the module's doc)."""
    out, depth, base = [], 0, 0
    for line in lines:
        comment, _, end_depth, opens = _scan(line, depth)
        indent = len(line) - len(line.lstrip())
        if depth == 0:
            base = indent
        elif cell_len(line) > width and indent > width // 2:  # a continuation inside brackets: any indent will do
            line = " " * (base + 4) + line.lstrip()
            comment, _, end_depth, opens = _scan(line, depth)
            indent = base + 4
        if cell_len(line) <= width:
            out.append(line)
        elif comment is None:
            out += _break_code(line, depth, width)
        else:
            code_part = line[:comment].rstrip()
            if code_part.strip():
                out += _break_code(code_part, depth, width)
            # inside brackets the comment goes where the next line of them starts; else under the code
            at = out[-1] if code_part.strip() else line
            under = opens[-1] if opens and end_depth > 0 and opens[-1] <= width // 2 else (
                len(at) - len(at.lstrip()) if end_depth > 0 and code_part.strip() else indent)
            out += _comment_lines(line[comment:], " " * under, width)
        depth = end_depth
    return out


def column_groups(widths: list[int], width: int, keep: int = 1) -> list[list[int]]:
    """The columns of a table (``widths``: each column's cells, separator included) in groups that each fit
    ``width``, the first ``keep`` columns (the row's name) repeated in every group. One group when all fit."""
    head = list(range(keep))
    base = sum(widths[:keep])
    groups, cur, used = [], [], base
    for i in range(keep, len(widths)):
        if cur and used + widths[i] > width:
            groups.append(head + cur)
            cur, used = [], base
        cur.append(i)
        used += widths[i]
    return groups + [head + cur] if cur or not groups else groups
