"""The `mascot` code each DVC stage runs: the transitive closure of the modules its command imports.

`dvc.yaml` lists exactly these files as the stage's code dependencies (a folder only where every module in it
is in the closure), so an edit to the rubric, the reward prompt or a backend makes exactly the stages that
run it stale. `tests/test_stage_deps.py` fails when the two drift apart; `python -m mascot.stage_deps` says which
stages drifted, and `--write` puts the computed lists into dvc.yaml (comments and other deps kept).

Imports inside functions count (the stages import lazily). The CLI dispatcher itself (`mascot/cli.py`) is not a
dependency; the modules it imports for every stage (the config, the error types) are. An empty `__init__.py`
(or one with only its docstring) holds no code and is left out.
"""
from __future__ import annotations

import ast
from functools import lru_cache
import io
from pathlib import Path
import sys

from ruamel.yaml import YAML
import yaml

from mascot.cli import STAGES

ROOT = Path(__file__).resolve().parents[1]
# what `mascot <stage>` runs, beside mascot.cli.STAGES: the promotion gates
EXTRA_STAGES = {"promote": "mascot.stages.promote", "promote_group": "mascot.stages.promote"}
# what mascot/cli.py imports for every stage before dispatching to it
DISPATCH = ("mascot.config", "mascot.headline", "mascot.io", "mascot.launch", "mascot.llm.backend", "mascot.reads",
            "mascot.stage_args")


def module_file(module: str, root: Path = ROOT) -> Path | None:
    base = root / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


@lru_cache(maxsize=None)
def _imports(path: Path, module: str) -> frozenset[str]:
    """The mascot modules `path` imports anywhere in its body (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from mascot.x import module`
    return frozenset(m for m in found if m == "mascot" or m.startswith("mascot."))


def closure(modules: list[str], root: Path = ROOT) -> set[Path]:
    """The files of `modules` and of every mascot module they import, transitively (package __init__s
    included: importing mascot.a.b runs mascot/a/__init__.py)."""
    seen: set[str] = set()
    todo = list(modules)
    files: set[Path] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module, root)
        if path is None:
            continue  # a name imported from a module, not a module
        if _has_code(path):
            files.add(path)
        parts = module.split(".")
        todo.extend(".".join(parts[:k]) for k in range(1, len(parts)))
        todo.extend(_imports(path, module))
    return files


def stage_entry(stage: str) -> str:
    return (STAGES.get(stage) or EXTRA_STAGES[stage]).partition(":")[0]


def stage_code(stage: str, root: Path = ROOT) -> list[str]:
    """The repo-relative mascot files stage `stage` runs, sorted."""
    files = closure([stage_entry(stage), *DISPATCH], root)
    return sorted(str(f.relative_to(root)) for f in files)


def listed_code(deps: list[str], root: Path = ROOT) -> set[str]:
    """The mascot files a dvc.yaml deps list covers (a folder covers every .py under it)."""
    out = set()
    for dep in deps:
        if not dep.startswith("mascot"):
            continue
        path = root / dep
        if path.is_dir():
            out.update(str(p.relative_to(root)) for p in path.rglob("*.py") if _has_code(p))
        else:
            out.add(dep)
    return out


def _has_code(path: Path) -> bool:
    """False for an `__init__.py` that holds nothing or only its docstring."""
    if path.name != "__init__.py":
        return True
    body = ast.parse(path.read_text()).body
    return bool(body[1:] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body)


def folded(files: list[str], root: Path = ROOT) -> list[str]:
    """`files` with each folder whose every module is among them written as the folder (shortest first)."""
    todo, out = set(files), []
    folders = sorted({str(Path(f).parent) for f in files} - {"mascot"}, key=lambda d: d.count("/"))
    for folder in folders:
        inside = {str(p.relative_to(root)) for p in (root / folder).rglob("*.py") if _has_code(p)}
        if inside and inside <= todo:
            out.append(folder)
            todo -= inside
    return sorted(out + sorted(todo))


def write(path: Path = ROOT / "dvc.yaml") -> None:
    """Replace every stage's mascot deps in dvc.yaml by its computed list; its data and model deps stay."""
    yaml = YAML()
    yaml.width, yaml.preserve_quotes = 200, True
    yaml.indent(mapping=2, sequence=4, offset=2)
    doc = yaml.load(path.read_text())
    for name, stage in doc["stages"].items():
        stage["deps"] = folded(stage_code(name)) + [d for d in stage.get("deps", []) if not str(d).startswith("mascot")]
    buf = io.StringIO()
    yaml.dump(doc, buf)
    path.write_text(buf.getvalue())


def main(argv: list[str] | None = None) -> None:
    if "--write" in (sys.argv[1:] if argv is None else argv):
        write()
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        need, listed = set(stage_code(name)), listed_code(stage.get("deps", []))
        status = "ok" if need == listed else f"missing {sorted(need - listed)}; not run {sorted(listed - need)}"
        print(f"{name}: {status}")


if __name__ == "__main__":
    main()
