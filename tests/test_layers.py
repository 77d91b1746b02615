"""The package's layers (README "Layout"; ../shared/STYLE.md): every import goes down the chain,
never up, TYPE_CHECKING and function-level imports included, and every module has a place in it.
The checker reads the import graph with ``ast`` (nothing is imported), so it also runs on a copy
of the package with a deliberately added upward import, and must catch it."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "torch_flops"

#: bottom to top; a module may import its own layer's modules and any layer below
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("leaves", frozenset({"errors", "paths", "measure", "hardware", "comm", "_gc", "_validate", "progress", "zoo", "kvcache",
                          "_version"})),
    ("formulas", frozenset({"formulas", "optim"})),
    ("capture", frozenset({"capture", "modelstate"})),
    ("plan", frozenset({"plan"})),
    ("run", frozenset({"backward", "measuring", "state", "runloop", "interpreter", "recorder"})),
    ("records", frozenset({"records", "conventions"})),
    ("views", frozenset({"report", "roofline", "plot", "distributed", "html", "diff", "generation_report",
                         "generation_plot"})),
    ("sessions", frozenset({"session", "calls", "training", "generation", "generation_sweep", "compiled",
                            "inductor_capture"})),
    ("facade", frozenset({"options", "analyzer", "api", "__init__"})),
    ("cli", frozenset({"cli", "__main__"})),
)


def _layer_of(module: str) -> int | None:
    """``formulas.rnn`` -> the formulas layer; ``plan`` -> the plan layer."""
    top = module.split(".")[0]
    for i, (_, names) in enumerate(LAYERS):
        if top in names:
            return i
    return None


def _imports(package: Path) -> dict[str, set[str]]:
    """Module (relative dotted name) -> the package modules it imports, read with ast."""
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package).with_suffix("")
        parts = list(rel.parts)
        is_init = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_init and len(parts) > 1 else parts)
        base = parts[:-1]  # the package this module is in
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base[: len(base) - node.level + 1]
                    module = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
                elif node.module and node.module.split(".")[0] == "torch_flops":
                    module = node.module.removeprefix("torch_flops").lstrip(".")
                else:
                    continue
                for alias in node.names:  # `from torch_flops import report` imports the module report
                    full = f"{module}.{alias.name}" if module else alias.name
                    targets.add(full if _exists(package, full) else module or "__init__")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch_flops":
                        targets.add(alias.name.removeprefix("torch_flops").lstrip(".") or "__init__")
        found[name] = {t for t in targets if t and t != name}
    return found


def _exists(package: Path, dotted: str) -> bool:
    path = package.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def upward_imports(package: Path) -> list[str]:
    """Every import that goes up a layer (``"plan -> records"``), and every module without a layer."""
    problems = []
    for module, targets in sorted(_imports(package).items()):
        mine = _layer_of(module)
        if mine is None:
            problems.append(f"{module}: in no layer (add it to LAYERS)")
            continue
        for target in sorted(targets):
            theirs = _layer_of(target)
            if module.startswith("formulas") and target == "formulas":
                continue  # a formula family registers through its own package's table
            if theirs is not None and theirs > mine:
                problems.append(f"{module} ({LAYERS[mine][0]}) -> {target} ({LAYERS[theirs][0]})")
    return problems


def test_every_import_goes_down_the_layers() -> None:
    assert upward_imports(PACKAGE) == []


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    copy = tmp_path / "torch_flops"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    plan = copy / "plan.py"
    plan.write_text(plan.read_text() + "\n\nif False:\n    from torch_flops.records import Profile  # noqa\n")
    assert upward_imports(copy) == ["plan (plan) -> records (records)"]
    # a TYPE_CHECKING import counts too, and a module of no layer is named
    measure = copy / "measure.py"
    measure.write_text(measure.read_text() + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from torch_flops.session import Recording  # noqa\n")
    (copy / "newcomer.py").write_text("X = 1\n")
    assert upward_imports(copy) == ["measure (leaves) -> session (sessions)", "newcomer: in no layer (add it to LAYERS)",
                                    "plan (plan) -> records (records)"]
    plan.write_text((PACKAGE / "plan.py").read_text())  # removed again: only the other two remain
    assert len(upward_imports(copy)) == 2
