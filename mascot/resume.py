"""Append-only record journals that make long stages resumable.

Each finished record is appended (and flushed) as soon as it exists, under a key that includes a
fingerprint of everything that produced it. A rerun loads the journal, keeps the records whose key still
matches, and only computes the rest; a line cut short by a crash is ignored.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

RESUME_DIR = Path(os.environ.get("MASCOT_RESUME_DIR", ".mascot/resume"))


def fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Journal:
    def __init__(self, stage: str, directory: Path | None = None):
        self.path = (directory or RESUME_DIR) / f"{stage}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the tail of a write cut off by a crash
                self.records[entry["key"]] = entry["record"]
        self.resumed = len(self.records)
        self._fh = self.path.open("a", encoding="utf-8")

    def get(self, key: str) -> dict | None:
        return self.records.get(key)

    def add(self, key: str, record: dict) -> None:
        self.records[key] = record
        self._fh.write(json.dumps({"key": key, "record": record}, ensure_ascii=False) + "\n")

    def flush(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def retain(self, keys: set[str]) -> None:
        """After a finished stage: keep only the records of the current configuration (atomic rewrite)."""
        self._fh.close()
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for key in keys:
                if key in self.records:
                    fh.write(json.dumps({"key": key, "record": self.records[key]}, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path)
        self.records = {k: v for k, v in self.records.items() if k in keys}
        self._fh = self.path.open("a", encoding="utf-8")
