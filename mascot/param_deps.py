"""The parameters and input files each DVC stage reads, from a run of the code (mascot/reads.py), against dvc.yaml.

A stage's `params:` list in dvc.yaml must cover every key its code read, or a change to that key leaves the
stage's results stale without a word; its `deps:` must cover every input file it read. Parameters cannot be
found by reading the code as `mascot/stage_deps.py` finds imports (a block is passed around under other names),
so they are recorded while the stages run: `MASCOT_RECORD_READS=DIR dvc repro`, then

    python -m mascot.param_deps DIR            # per stage: ok, or what dvc.yaml misses and what it lists unread
    python -m mascot.param_deps DIR --write    # each recorded stage's params list from the record

A key of another stage's block is listed as read (`evaluate` lists `train_rm.registered_model`); a stage's own block
(`train_rm` for train_rm) and a nested block whose field was read (`grpo.watch`, `llm.speaker`, `score.scorer`) are
listed whole, because their switches (`enabled`, `kind`) decide which of their other fields the code reads, and a
record only sees the branch that ran.
"""
from __future__ import annotations

import io
from pathlib import Path
import re
import sys

from ruamel.yaml import YAML
import yaml

from mascot import reads

ROOT = Path(__file__).resolve().parents[1]


def unit(key: str) -> str:
    """What dvc.yaml lists for a read key: the key itself under a top-level block, its nested block deeper down."""
    parts = key.split(".")
    return ".".join(parts[:2])


def units(keys) -> set[str]:
    return {unit(k) for k in keys}


# a stage's own params block, where its name differs from the stage's
OWN_BLOCK = {"human_set": "human", "train_grpo": "grpo", "pairs_group": "group_pairs"}


def stage_units(stage: str, keys) -> set[str]:
    """What dvc.yaml lists for what `stage` read: its own block whole (its switches decide which of its keys the code
    reads, and a record sees one branch), every other block's keys one by one (`units`)."""
    own = OWN_BLOCK.get(stage, stage)
    found = units(keys)
    if any(covers(own, u) for u in found):
        found = {u for u in found if not covers(own, u)} | {own}
    return found


def covers(listed: str, key: str) -> bool:
    return key == listed or key.startswith(listed + ".")


def interpolated(text: str, params: dict) -> str:
    """A dvc.yaml entry with its `${block.key}` references filled in from params.yaml, as DVC fills them."""
    def value(match):
        found = params
        for part in match.group(1).split("."):
            found = found.get(part, {}) if isinstance(found, dict) else {}
        return str(found) if found != {} else match.group(0)
    return re.sub(r"\$\{([^}]+)\}", value, text)


_MISSING = object()


def _lookup(params: dict, key: str):
    found = params
    for part in key.split("."):
        if not isinstance(found, dict) or part not in found:
            return _MISSING
        found = found[part]
    return found


def listed_params(stage: dict) -> list[str]:
    """The params.yaml keys a dvc.yaml stage lists (entries naming another params file are not ours)."""
    return [str(p) for p in stage.get("params") or [] if isinstance(p, str)]


def check_stage(stage: dict, record: dict, params: dict | None = None, name: str = "") -> dict:
    """{missing_params, unread_params, missing_files} of one dvc.yaml stage (named `name`) against its record."""
    listed = listed_params(stage)
    read = stage_units(name, record["params"])
    deps = [interpolated(str(d), params or {}).rstrip("/") for d in stage.get("deps") or []]
    outs = [str(next(iter(o)) if isinstance(o, dict) else o).rstrip("/")
            for kind in ("outs", "metrics", "plots") for o in stage.get(kind) or []]
    return {"missing_params": sorted(u for u in read if not any(covers(p, u) for p in listed)),
            # DVC refuses a listed key that params.yaml lacks (a schema default never written there)
            "not_in_params_yaml": sorted(p for p in listed if params is not None and _lookup(params, p) is _MISSING),
            "unread_params": sorted(p for p in listed if not any(covers(p, u) or covers(u, p) for u in read)),
            "missing_files": sorted(f for f in record["files"]
                                    if not any(covers_path(d, f) for d in deps + outs) and not f.startswith(".mascot/"))}


def covers_path(listed: str, path: str) -> bool:
    return path == listed or path.startswith(listed + "/")


def _params_of(dvc_yaml: Path) -> dict:
    path = Path(dvc_yaml).with_name("params.yaml")
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def check(records: dict, dvc_yaml: Path = ROOT / "dvc.yaml") -> dict[str, dict]:
    stages, params = yaml.safe_load(Path(dvc_yaml).read_text())["stages"], _params_of(dvc_yaml)
    return {name: check_stage(stages[name], rec, params, name) for name, rec in sorted(records.items()) if name in stages}


def write(records: dict, dvc_yaml: Path = ROOT / "dvc.yaml") -> None:
    """Each recorded stage's `params:` list from its record, and the input files it read that its `deps:` miss
    added to them (stages without a record keep theirs)."""
    ry = YAML()
    ry.width, ry.preserve_quotes = 200, True
    ry.indent(mapping=2, sequence=4, offset=2)
    doc, params = ry.load(Path(dvc_yaml).read_text()), _params_of(dvc_yaml)
    for name, rec in records.items():
        if name in doc["stages"]:
            stage = doc["stages"][name]
            stage["params"] = sorted(stage_units(name, rec["params"]))
            stage["deps"] = list(stage.get("deps") or []) + check_stage(stage, rec, params, name)["missing_files"]
    buf = io.StringIO()
    ry.dump(doc, buf)
    Path(dvc_yaml).write_text(buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folders = [a for a in args if not a.startswith("--")]
    if len(folders) != 1:
        print("usage: python -m mascot.param_deps DIR [--write]  (DIR: where MASCOT_RECORD_READS wrote a run's reads)")
        return 2
    records = reads.load(folders[0])
    if "--write" in args:
        write(records)
    bad = 0
    for name, found in check(records).items():
        wrong = {k: v for k, v in found.items() if v}
        bad += bool(wrong.get("missing_params") or wrong.get("missing_files") or wrong.get("not_in_params_yaml"))
        print(f"{name}: " + ("ok" if not wrong else "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in wrong.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
