"""JSONL read/write: atomic whole-file writes, and errors that name the file and line."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import sys
import tempfile
from typing import Any, Iterable, Iterator

import yaml

from mascot import reads


class InputError(ValueError):
    """Bad input data: the message names the file, the line or row, and what is wrong."""


@dataclass
class BadRows:
    """Stop on the first bad row, or (skip=True) count, report and skip bad rows."""

    skip: bool = False
    messages: list[str] = field(default_factory=list)

    def report(self, exc: InputError) -> None:
        if not self.skip:
            raise exc
        self.messages.append(str(exc))
        print(f"skipped bad row: {exc}", file=sys.stderr)

    @contextlib.contextmanager
    def guard(self):
        try:
            yield
        except InputError as exc:
            self.report(exc)


def read_jsonl(path: str | Path, bad: BadRows | None = None) -> Iterator[tuple[int, dict]]:
    """Yield (line number, record); blank lines are skipped, malformed ones go to `bad` (default: raise)."""
    path = Path(path)
    bad = bad or BadRows()
    reads.file_read(path)
    if not path.exists():
        raise InputError(f"{path}: file not found")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                bad.report(InputError(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(record, dict):
                bad.report(InputError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}"))
                continue
            yield lineno, record


def read_yaml(path: str | Path, what: str, error: type[Exception] = InputError):
    """A YAML file's contents; a missing file or bad YAML raises `error` naming the file (and `what` it is)."""
    path = Path(path)
    reads.file_read(path)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid YAML: {exc}") from None


def read_json(path: str | Path, missing: str = "") -> dict:
    """A JSON file another stage wrote (a decision, a registered version, a measurement); a missing or unreadable
    one raises InputError naming it, and `missing` (what to run)."""
    path = Path(path)
    reads.file_read(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not found or unreadable ({exc}){'; ' + missing if missing else ''}") from None


def load_jsonl(path: str | Path) -> list[dict]:
    return [record for _, record in read_jsonl(path)]


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write all records to a temporary file and rename it into place: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def columns_of(rows: list[dict]) -> dict[str, list]:
    """Rows as columns (what `mlflow.log_table` takes): every key any row has, in first-seen order; a row
    without a key gets None there."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return {key: [row.get(key) for row in rows] for key in columns}


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def require(record: dict, field: str, kind: type | tuple[type, ...], where: str) -> Any:
    """Fetch a required field of the expected type, or raise InputError naming where and which field."""
    if field not in record:
        raise InputError(f"{where}: missing field '{field}'")
    value = record[field]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(f"{where}: field '{field}' should be {names}, got {type(value).__name__}")
    return value


def require_model_dir(path: str, key: str) -> str:
    """Local model folders only at run time (no hub downloads): say which key names a missing one."""
    if not (Path(path) / "config.json").exists() and not (Path(path) / "tokenizer_config.json").exists():
        raise InputError(f"{key}: '{path}' is not a local model folder; build it with `dvc repro base_model` "
                         "(or `mascot base_model`), or point the key at a model folder")
    return path
