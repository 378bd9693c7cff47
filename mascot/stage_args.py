"""A stage's files, handed in. dvc.yaml's `cmd` names every file a stage reads and writes (`mascot evaluate
--queries data/queries.jsonl ...`), and the stage function takes them as keyword-only arguments, so no path is
written twice. By hand, `mascot <stage>` takes the files its dvc.yaml `cmd` names; an option given overrides one.
"""
from __future__ import annotations

import inspect
from pathlib import Path
import shlex

import yaml


class StageArgsError(ValueError):
    """A stage's options do not match what its function takes (the message names the option and the stage)."""


def parse_options(tokens: list[str], where: str) -> dict[str, str]:
    """`--name VALUE` (or `--name=VALUE`) pairs -> {name: VALUE}, dashes in names read as underscores."""
    options, rest = {}, iter(tokens)
    for token in rest:
        if not token.startswith("--") or token == "--":
            raise StageArgsError(f"{where}: expected --option VALUE, got {token!r}")
        name, eq, value = token[2:].partition("=")
        if not eq:
            value = next(rest, None)
            if value is None or value.startswith("--"):
                raise StageArgsError(f"{where}: --{name} needs a value")
        options[name.replace("-", "_")] = value
    return options


def dvc_stage(stage: str, dvc_yaml: str | Path = "dvc.yaml") -> dict:
    """`stage`'s entry in dvc.yaml ({} without a dvc.yaml or such a stage)."""
    path = Path(dvc_yaml)
    if not path.exists():
        return {}
    return ((yaml.safe_load(path.read_text()) or {}).get("stages") or {}).get(stage) or {}


def dvc_cmd_options(stage: str, dvc_yaml: str | Path = "dvc.yaml") -> dict[str, str]:
    """The options dvc.yaml's `cmd` gives `stage` ({} without a dvc.yaml or such a stage)."""
    path = Path(dvc_yaml)
    cmd = dvc_stage(stage, path).get("cmd")
    if not cmd:
        return {}
    tokens = shlex.split(cmd)
    start = tokens.index(stage) + 1 if stage in tokens else len(tokens)
    return parse_options(tokens[start:], f"{path}: stages.{stage}.cmd")


def metrics_file(stage: str, dvc_yaml: str | Path = "dvc.yaml") -> str:
    """The headline file dvc.yaml's `metrics:` declares for `stage` (`metrics/<stage>.json` where no dvc.yaml
    or no such stage says otherwise, as when a stage runs by hand in a bare folder)."""
    path = Path(dvc_yaml)
    declared = [next(iter(m)) if isinstance(m, dict) else m for m in dvc_stage(stage, path).get("metrics") or []]
    if len(declared) > 1:
        raise StageArgsError(f"{path}: stages.{stage}.metrics lists {len(declared)} files; a stage writes one "
                             "headline file")
    return declared[0] if declared else f"metrics/{stage}.json"


def file_parameters(function) -> dict[str, bool]:
    """The files a stage function takes, its keyword-only parameters: {name: required} (one with a default, such
    as a file only one granularity reads, may be left out)."""
    return {p.name: p.default is p.empty for p in inspect.signature(function).parameters.values()
            if p.kind is p.KEYWORD_ONLY}


def stage_files(function, stage: str, given: dict[str, str], dvc_yaml: str | Path = "dvc.yaml") -> dict[str, str]:
    """The keyword arguments to call `function` with: each file from the options given, else from dvc.yaml's
    `cmd` for `stage`; an option the function does not take, or a file neither names, is an error."""
    wanted = file_parameters(function)
    flags = ", ".join(f"--{w.replace('_', '-')}" for w in wanted) or "none"
    unknown = sorted(set(given) - set(wanted))
    if unknown:
        raise StageArgsError(f"mascot {stage}: no option --{unknown[0].replace('_', '-')} (it takes {flags})")
    from_dvc = dvc_cmd_options(stage, dvc_yaml)
    stray = sorted(set(from_dvc) - set(wanted))
    if stray:
        raise StageArgsError(f"{dvc_yaml}: stages.{stage}.cmd gives --{stray[0].replace('_', '-')}, which "
                             f"`mascot {stage}` does not take (it takes {flags})")
    files = {name: given.get(name, from_dvc.get(name)) for name in wanted}
    missing = [name for name, value in files.items() if value is None and wanted[name]]
    if missing:
        raise StageArgsError(f"mascot {stage}: give --{missing[0].replace('_', '-')} (dvc.yaml's cmd for this stage "
                             f"names no such file; it takes {flags})")
    return {name: value for name, value in files.items() if value is not None}
