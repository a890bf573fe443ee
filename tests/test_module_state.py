"""No module-level mutable state outside ``run/`` (the one place that holds processes and caches), and no rule that
reaches the accounting or the rule registry (a circle: registry -> rules -> accounting -> registry).

The first is a scan of every module's syntax: a ``global`` statement, a ``globals()[...]`` write, a module-level
list, dict or set bound to a name that is not an ALL_CAPS constant, or a module-level container that code in its
module changes (``.append``, ``[k] = v``, ...). Each offence is named with its file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parents[1] / "traceinspect"
HOLDS_STATE = ("run",)  # the packages that may: orchestration (pools, caches), handed down from there
MUTATORS = {"append", "extend", "insert", "pop", "popitem", "clear", "update", "setdefault", "add", "discard",
            "remove", "__setitem__", "__delitem__", "sort", "reverse"}
CONTAINERS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
CONTAINER_CALLS = {"list", "dict", "set", "defaultdict", "OrderedDict", "deque", "Counter", "bytearray"}


def _is_container(v: ast.AST | None) -> bool:
    if isinstance(v, CONTAINERS):
        return True
    return isinstance(v, ast.Call) and getattr(v.func, "id", getattr(v.func, "attr", None)) in CONTAINER_CALLS


def _constant_name(name: str) -> bool:
    return name.strip("_").isupper() or (name.startswith("__") and name.endswith("__"))


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _locals(fn: ast.AST) -> set[str]:
    args = fn.args if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else None
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]} if args else set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str]] = []
    containers = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and _is_container(node.value):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    containers.add(t.id)
                    if not _constant_name(t.id):
                        out.append((node.lineno, f"{path}:{node.lineno}: module-level {type(node.value).__name__} {t.id}"))
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        mine = containers - _locals(fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                out.append((node.lineno, f"{path}:{node.lineno}: global {', '.join(node.names)}"))
            changed = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                changed = _root_name(node.func.value)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Subscript):
                        if isinstance(t.value, ast.Call) and getattr(t.value.func, "id", None) == "globals":
                            out.append((node.lineno, f"{path}:{node.lineno}: writes globals()"))
                        changed = changed or _root_name(t)
            if changed in mine:
                out.append((node.lineno, f"{path}:{node.lineno}: changes module-level {changed}"))
    return [text for _, text in sorted(set(out))]


def test_no_module_level_mutable_state_outside_run():
    found = [o for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(PACKAGE).parts[0] not in HOLDS_STATE for o in offences(p)]
    assert not found, "\n".join(found)


def test_the_scan_sees_each_kind_of_offence(tmp_path):
    """Constructed module: each offence the scan names, and the constants and locals it lets be."""
    src = tmp_path / "m.py"
    src.write_text("TABLE = {'a': 1}\ncache = {}\n_SEEN = []\n"
                   "def f(x):\n    global cache\n    _SEEN.append(x)\n    TABLE['b'] = 2\n    globals()['y'] = x\n"
                   "def g():\n    _SEEN = []\n    _SEEN.append(1)\n    return TABLE.get('a')\n")
    found = offences(src)
    assert [o.split(": ", 1)[1] for o in found] == [
        "module-level Dict cache", "global cache", "changes module-level _SEEN", "changes module-level TABLE",
        "writes globals()"]


RULE_INFRASTRUCTURE = ("traceinspect.diagnose", "traceinspect.diagnose.accounting", "traceinspect.diagnose.engine")


def test_no_rule_reaches_the_accounting_or_the_registry():
    """The rules are leaves of the diagnose stage: the registry (``diagnose/__init__``) imports them, the accounting
    and the engine read what they declare; a rule importing any of these, even through a helper, is a circle."""
    from traceinspect.diagnose import RULE_MODULES

    graph = grimp.build_graph("traceinspect")
    chains = []
    for name in RULE_MODULES:
        rule = f"traceinspect.diagnose.{name}"
        for target in RULE_INFRASTRUCTURE:
            chain = graph.find_shortest_chain(importer=rule, imported=target)
            if chain:
                chains.append(" -> ".join(chain))
    assert not chains, "\n".join(chains)
