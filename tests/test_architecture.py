"""The package's floors (docs/architecture.md): no import circle, no import from a lower floor up to a higher one,
and function-local imports only where a light module must not load a heavy library. Read from the source's
syntax trees, so every import counts, at the top of a module or inside a function."""
from __future__ import annotations

import ast
from pathlib import Path
import subprocess
import sys

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mascot"

STAGE_MODULES = ("base_model", "prepare", "human_set", "generate", "judge_check", "score", "pairs", "validate",
                 "train_rm", "promote", "train_grpo", "evaluate", "episodes", "train_director", "evaluate_group")
# each module's floor (docs/architecture.md): a module imports only modules on its own floor or below. A new
# module gets a floor here, where the reader of docs/architecture.md will look for it.
FLOORS = {
    # 0: foundations: they import only each other
    "mascot": 0, "mascot.io": 0, "mascot.reads": 0, "mascot.progress": 0, "mascot.stats": 0, "mascot.transcript": 0,
    "mascot.trainer_args": 0, "mascot.precision": 0, "mascot.launch": 0,
    "mascot.llm": 0, "mascot.llm.backend": 0, "mascot.llm.servers": 0, "mascot.llm.nucleus": 0, "mascot.data": 0, "mascot.data.dialogue": 0,
    # 1: shared services: params, journals, splits, the registry, personas, corpus readers
    "mascot.config": 1, "mascot.stage_args": 1, "mascot.profiles": 1, "mascot.resume": 1, "mascot.checkpoints": 1, "mascot.splits": 1,
    "mascot.registry": 1, "mascot.llm.identity": 1, "mascot.data.personas": 1, "mascot.data.queries": 1,
    "mascot.data.sources": 1, "mascot.data.sources.esconv": 1, "mascot.data.sources.qmsum": 1,
    "mascot.data.sources.empathetic": 1, "mascot.data.sources.jsonl": 1,
    # 2: models and the prepared data (stage `prepare`, `human_set`, `base_model`)
    "mascot.llm.local_backend": 2, "mascot.llm.openai_backend": 2, "mascot.llm.factory": 2,
    "mascot.llm.base_model": 2, "mascot.data.prepare": 2, "mascot.data.human_ratings": 2,
    # 3: annotation's parts: rubrics, the judge, the speaker's prompts, the Director's rollout, reference sets
    "mascot.annotate": 3, "mascot.annotate.rubric": 3, "mascot.annotate.function_judge": 3,
    "mascot.annotate.generate": 3, "mascot.annotate.director": 3, "mascot.annotate.reference_set": 3,
    "mascot.annotate.controls": 3, "mascot.annotate.pairwise": 3, "mascot.annotate.survey": 3, "mascot.annotate.fitted_aggregation": 3,
    # 4: one paradigm at two granularities (a reply, a block of group turns)
    "mascot.granularity": 4,
    # 5: the cores of the stages from scores to a promoted reward model
    "mascot.annotate.score": 5, "mascot.annotate.judge_check": 5, "mascot.annotate.episodes": 5, "mascot.pairs": 5,
    "mascot.validate": 5, "mascot.validate.suites": 5, "mascot.validate.gate": 5,
    "mascot.reward": 5, "mascot.reward.prompt": 5, "mascot.reward.scorer": 5, "mascot.reward.evaluation": 5,
    "mascot.reward.train": 5, "mascot.reward.odin": 5, "mascot.promote": 5,
    # 6: policies' cores: GRPO for the speaker and the Director, the watch, the evaluations
    "mascot.policy": 6, "mascot.policy.rewards": 6, "mascot.policy.watch": 6, "mascot.policy.watch.verdict": 6,
    "mascot.policy.watch.chart": 6, "mascot.policy.watch.kl": 6, "mascot.policy.watch.callback": 6, "mascot.policy.engine": 6, "mascot.policy.grpo": 6,
    "mascot.policy.evaluate": 6, "mascot.policy.director": 6, "mascot.policy.evaluate_group": 6,
    "mascot.policy.choice_probe": 6, "mascot.policy.rollout_grammar": 6,
    # 7: the stages, one module per DVC stage (its two granularities in one): files, MLflow and printing
    "mascot.stages": 7, **{f"mascot.stages.{name}": 7 for name in STAGE_MODULES},
    # operations apart from the method (`mascot serve`, `mascot stack`): only the command line imports them
    "mascot.ops": 0, "mascot.ops.processes": 0, "mascot.ops.serve": 0, "mascot.ops.stack": 0,
    "mascot.ops.stack.common": 0, "mascot.ops.stack.postgres": 0, "mascot.ops.stack.seaweedfs": 0,
    "mascot.ops.stack.mlflow_server": 0, "mascot.ops.stack.supervisor": 0,
    # 8: the command line and what reads it
    "mascot.cli": 8, "mascot.stage_deps": 8, "mascot.param_deps": 8, "mascot.headline": 1,
}
# what a light command (`mascot --help`, `mascot profile`, `mascot stack`) must not load
HEAVY = {"torch", "transformers", "trl", "peft", "mlflow", "vllm", "openai", "datasets", "accelerate",
         "great_expectations", "pandas", "matplotlib", "scipy", "safetensors", "huggingface_hub", "gguf", "xgrammar",
         "tokenizers", "llama_cpp", "psycopg2", "boto3", "botocore", "httpx", "httpx2"}
DISPATCHER = "mascot.cli"  # loads a subcommand's module for that subcommand only (mascot/stage_deps.py)


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: dict) -> list[tuple[str, bool, int]]:
    """(imported module, inside a function, line) for every import in `path`; `from a import b` names a.b when
    that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, True)
            elif isinstance(child, ast.Import):
                found.extend((a.name, in_function, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for a in child.names:
                    full = f"{base}.{a.name}"
                    found.append((full if full in known else base, in_function, child.lineno))
            else:
                visit(child, in_function)
    visit(ast.parse(path.read_text()), False)
    return found


def graph():
    known = modules()
    return known, {name: imports(name, path, known) for name, path in known.items()}


def own(target: str) -> bool:
    return target == "mascot" or target.startswith("mascot.")


def heavy_modules(known, edges) -> set[str]:
    """Project modules that load a heavy library when imported (directly or through a top-level import)."""
    heavy = {m for m, found in edges.items() if any(t.split(".")[0] in HEAVY and not local for t, local, _ in found)}
    grew = True
    while grew:
        grew = False
        for m, found in edges.items():
            if m not in heavy and any(own(t) and t in heavy and not local for t, local, _ in found):
                heavy.add(m)
                grew = True
    return heavy


def test_every_module_has_a_floor():
    known = modules()
    assert not set(known) - set(FLOORS), f"give these modules a floor (tests/test_architecture.py, docs/architecture.md): {sorted(set(known) - set(FLOORS))}"
    assert not set(FLOORS) - set(known), f"no such module: {sorted(set(FLOORS) - set(known))}"


def test_no_import_goes_up_a_floor_and_none_is_a_circle():
    known, edges = graph()
    up = [f"{m} (floor {FLOORS[m]}) imports {t} (floor {FLOORS[t]}), line {line}"
          for m, found in edges.items() for t, _, line in found if own(t) and t in FLOORS and FLOORS[t] > FLOORS[m]]
    assert not up, "imports that go up a floor:\n" + "\n".join(up)
    # a circle can only sit on one floor: find one with a depth-first search
    adjacency = {m: sorted({t for t, _, _ in found if own(t) and t in known and t != m}) for m, found in edges.items()}
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in adjacency[m]:
            if state.get(t) == "open":
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"
    for m in sorted(adjacency):
        if m not in state:
            visit(m)


def test_function_local_imports_only_keep_heavy_libraries_out_of_light_modules():
    """Inside a function: a heavy or optional third-party library, or a project module that loads one, imported
    by a module that does not load it already; and the dispatcher's per-subcommand modules. Nothing else."""
    known, edges = graph()
    heavy = heavy_modules(known, edges)
    wrong = []
    for m, found in edges.items():
        for t, local, line in found:
            if not local:
                continue
            root = t.split(".")[0]
            if root in sys.stdlib_module_names or root == "__future__":
                wrong.append(f"{known[m].relative_to(ROOT)}:{line}: the standard library's {t} (import it at the top)")
            elif own(t) and m != DISPATCHER and (t not in heavy or m in heavy):
                why = f"{m} loads a heavy library already" if m in heavy else f"{t} is light"
                wrong.append(f"{known[m].relative_to(ROOT)}:{line}: {t} inside a function ({why}: import it at the top)")
    assert not wrong, "\n".join(wrong)


def test_a_light_command_loads_no_heavy_library():
    code = ("import sys, mascot.cli, mascot.config, mascot.profiles, mascot.stage_deps, mascot.granularity, mascot.pairs;"
            f"print(sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert loaded.strip() == "[]", f"importing the command line loads {loaded.strip()}"


def test_no_undefined_name_and_no_unused_import():
    """pyflakes over the package and the benchmarks: a name used but never imported fails only when its line
    runs, maybe on a GPU an hour in; an unused import is a dependency nobody needs."""
    found = subprocess.run([sys.executable, "-m", "pyflakes", "mascot", "benchmarks"], capture_output=True, text=True,
                           cwd=ROOT)
    assert found.returncode == 0 and not found.stdout.strip(), found.stdout + found.stderr


def test_every_stage_runs_from_its_own_room_and_no_stage_imports_another():
    """`mascot <stage>` runs a function of mascot/stages/<module>.py, and a stage module imports no other stage
    module (what two stages share lives below both)."""
    from mascot.cli import STAGES
    from mascot.stage_deps import EXTRA_STAGES

    targets = {target.partition(":")[0] for target in {**STAGES, **EXTRA_STAGES}.values()}
    assert targets == {f"mascot.stages.{name}" for name in STAGE_MODULES}, targets
    edges = {m: [t for t, _, _ in found] for m, found in graph()[1].items()}
    crossing = {m: sorted(t for t in edges.get(m, []) if t in targets and t != m) for m in targets}
    assert not any(crossing.values()), crossing


def test_the_pipeline_imports_no_operations_code():
    """`mascot serve` and the team stack live in mascot/ops: only the command line (for those subcommands) and
    ops itself import it, so no stage runs operations code."""
    known, edges = graph()
    into_ops = sorted(f"{m} -> {t} (line {line})" for m, found in edges.items() for t, _, line in found
                      if t.startswith("mascot.ops") and not m.startswith("mascot.ops") and m != DISPATCHER)
    assert not into_ops, into_ops
