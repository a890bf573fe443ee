"""The rule contract (diagnose/_rule.py): every rule declares its claim, label, settings, evidence and fix; the
accounting never asks which rule it holds; a module without a declaration is an error, not a default; the
findings doc's tables are the declarations'. Real H200 fixtures."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import msgspec
import pytest

from traceinspect import diagnose
from traceinspect.diagnose import (RULE_MODULES, Rule, all_rules, doc_of, exposed_comm, get_rule, load_rules,
                                   small_buckets, straggler, sync_every_microstep)
from traceinspect.diagnose.engine import finish
from traceinspect.diagnose.tables import findings_tables, generated_part

from _real import CFG as NOCACHE, GPU, analysis, report
from public_traces import PUBLIC

MEMORY = [PUBLIC / "hta_v100_memory", PUBLIC / "tracelens_mi300_memory"]

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "traceinspect"


def test_every_rule_declares_its_contract():
    rules = all_rules()
    assert [r.id for r in rules] and len(rules) == len(RULE_MODULES)
    for r in rules:
        assert isinstance(r, Rule) and r.label and r.title and r.doc.startswith(r.id + ":")
        assert issubclass(r.evidence, msgspec.Struct) and callable(r.fix) and callable(r.check)
        # a rule claims time (its pools) or bytes of peak memory (graded by its own memory scale), never both
        assert (r.claim.gpu is not None or r.claim.cpu is not None) != (r.claim.memory is not None), r.id
    assert len({r.claim.order for r in rules}) == len(rules), "one place in the claim order each"
    assert len({r.label for r in rules}) == len(rules)
    assert sum(r.claim.fixes_loader for r in rules) == 1


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code, its docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def test_no_rule_id_outside_the_rule_modules():
    ids = [r.id for r in all_rules()]
    rule_files = {PKG / "diagnose" / f"{m}.py" for m in RULE_MODULES}
    core = ["accounting.py", "bounds.py", "severity.py", "engine.py", "finding.py", "_rule.py", "_util.py",
            "tables.py"]
    for name in core:  # the diagnose core: not even as part of a string
        for text in _code_strings(PKG / "diagnose" / name):
            assert not [i for i in ids if i in text], (name, text)
    src = (PKG / "diagnose" / "accounting.py").read_text()
    assert "f.id ==" not in src and "LABELS" not in src and "ORDER" not in src
    # anywhere else (the registry, RULE_MODULES, names modules, not ids): no hyphenated rule id
    generated = {PKG / "render" / "evidence_units.py"}  # the rules' declared units, written from the rules
    for path in PKG.rglob("*.py"):
        if path in rule_files or path in generated:
            continue
        for text in _code_strings(path):
            assert not [i for i in ids if "-" in i and i in text], (path, text)


def test_a_rule_module_without_a_declaration_is_an_error_not_a_default(monkeypatch):
    """CONSTRUCTED: a module beside the real rules with a ``check`` but no ``RULE``: it cannot load (one line in the
    report's errors), the real rules' findings on a real trace are unchanged."""
    rep = analysis(GPU / "big_baseline")
    bare = types.ModuleType("traceinspect.diagnose.undeclared_rule")
    bare.check = lambda report, config: []
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    monkeypatch.setattr(diagnose, "RULE_MODULES", RULE_MODULES + ("undeclared_rule",))
    rules, errors = load_rules()
    assert [r.id for r in rules] == [r.id for r in all_rules()] and len(rules) == len(RULE_MODULES)
    assert errors == ["rule module undeclared_rule cannot be loaded: TypeError: "
                      "traceinspect.diagnose.undeclared_rule declares no RULE = Rule(...)"]
    out = finish(rep.source, list(rep.ranks), [], rep.world_size, NOCACHE)
    assert errors[0] in out.errors
    assert [(f.id, f.severity, f.time_at_stake_us) for f in out.findings] == \
        [(f.id, f.severity, f.time_at_stake_us) for f in rep.findings]


def test_rules_set_no_severity_the_accounting_grades_once():
    rep = analysis(GPU / "big_baseline")
    raw = [f for r in all_rules() for f in r.check(rep, NOCACHE)]
    assert {f.severity for f in raw} == {"info"}, "ungraded until the accounting"
    graded = {f.id: f.severity for f in rep.findings}
    assert graded["dataloader-stall"] == "warning" and graded["pageable-memcpy"] == "warning"
    assert all(f.extra["severity_reason"] for f in rep.findings)


def test_the_findings_doc_tables_are_the_declarations():
    doc = (ROOT / "docs" / "findings.md").read_text()
    assert generated_part(doc), "docs/findings.md holds the generated tables' markers"
    assert generated_part(doc) == findings_tables(), \
        "docs/findings.md is stale: python -m traceinspect.diagnose.tables docs/findings.md"
    for r in all_rules():
        assert f"| `{r.id}` | {r.label} |" in doc


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.id)
def test_the_evidence_json_is_the_record(rule):
    """On the real fixtures where the rule fires: the JSON evidence is the declared record (its types hold), and the
    fix is the declared fix of that evidence."""
    seen = 0
    folders = [GPU / f for f in ("big_baseline", "baseline", "tf_shapes", "bf16_scaler", "single_adamw",
                                 "no_sync_off", "fp32", "deep_tiny")]
    folders += [f for f in MEMORY if f.exists()]  # the public traces recorded with memory events, where present
    for folder in folders:
        rep = analysis(folder)
        setups = {ra.rank: getattr(ra, "setup", None) for ra in rep.ranks}
        for f, d in zip(rep.findings, report(folder)["findings"]):  # the same analysis's document
            if f.id != rule.id:
                continue
            seen += 1
            record = msgspec.convert(d["evidence"], rule.evidence, strict=False)
            assert set(d["evidence"]) <= set(rule.evidence.__struct_fields__)
            if not getattr(rule.evidence, "FIX_ONLY", ()):
                assert rule.fix(record, setups.get(d["ranks"][0])) == f.fix  # fitted to the titled rank's setup
    # FSDP's, the pipeline's and tensor parallel's rules fire on CPU captures only: tests/diagnose/test_fsdp_pairs.py,
    # test_fsdp_reducescatter.py, test_pipeline_bubble.py and test_tp_exposed_comm.py check their records; the
    # memory rules that need a card near full, a leak or DDP's metadata fire on CPU captures and the GPU memory
    # fixtures (tests/diagnose/test_thresholds.py, test_ddp_gradient_copies.py, tests/analyze/test_memory.py)
    cpu_only = ("straggler", "exposed-comm", "fsdp-exposed-allgather", "fsdp-exposed-reducescatter",
                "pipeline-bubble", "tp-exposed-comm", "memory-near-full", "memory-growth", "ddp-gradient-copies")
    if not MEMORY[0].exists() and rule.id in ("allocator-slack", "memory-headroom"):
        pytest.skip("fires on the public traces recorded with memory events, not present here")
    assert seen or rule.id in cpu_only, "fires on a real fixture"


@pytest.mark.parametrize("mod", [small_buckets, sync_every_microstep, exposed_comm, straggler])
def test_rule_modules_are_documented(mod):
    assert get_rule(mod.RULE.id) is mod.RULE
    doc = mod.__doc__
    for part in ("**Detects**", "**Condition**", "**Why it matters**", "**Fix**"):
        assert part in doc, (mod.RULE.id, part)
    assert mod.RULE.title and mod.RULE.doc == doc.strip()


#: The precision, launch and optimizer rules, by module
MINE = {
    "no_mixed_precision": "no-mixed-precision",
    "gradscaler_with_bf16": "gradscaler-with-bf16",
    "launch_bound": "launch-bound",
    "optimizer_not_fused": "optimizer-not-fused",
    "tensor_core_alignment": "tensor-core-alignment",
}


@pytest.mark.parametrize("module,rule_id", sorted(MINE.items()))
def test_rules_are_registered_and_documented(module, rule_id):
    assert module in RULE_MODULES
    mod = get_rule(rule_id)
    assert mod is not None and mod.ID == rule_id and mod.TITLE
    doc = doc_of(mod)
    assert doc.startswith(rule_id + ":")
    for part in ("**Condition**", "**Fix**", "::"):
        assert part in doc
