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

from mascot.progress import bar

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


def run_journaled(keys: list[str], compute, journal: Journal | None, chunk_size: int, label: str,
                  per_key: int = 1, stats: dict | None = None) -> dict[str, dict]:
    """The resumable loop of generate, score and episodes: the records of `keys` (one per key), computed
    `chunk_size` keys at a time by `compute(start, end)` (a list of records for keys[start:end]) and journaled
    as each chunk finishes. `per_key` scales the progress bar (e.g. n samples per key). Returns key -> record.

    A resumed run writes exactly what an uninterrupted one would. Chunks are fixed over the whole key list, so
    a chunk redone after a crash gets the same batches and seeds; and a record is journaled under its key and
    its chunk's members, because an in-process batch's sampling (one RNG stream per batch, padding) depends on
    what else is in it: a record made in another chunk (another `max_queries`, batch size or key order) is
    recomputed, not reused."""
    chunks = [(start, min(start + chunk_size, len(keys))) for start in range(0, len(keys), chunk_size)]
    journal_key = {}
    for start, end in chunks:
        members = fingerprint(keys[start:end])  # once a chunk, not once a key
        journal_key.update((key, f"{key}@{members}") for key in keys[start:end])
    done = {key: record for key in keys if journal and (record := journal.get(journal_key[key]))}
    if stats is not None:
        stats.update(reused=len(done), total=len(keys))
    if journal:  # a reused record is one this stage did not compute now: say how many
        print(f"{label}: {len(done)} of {len(keys)} records reused from {journal.path}", flush=True)
    progress = bar(len(keys) * per_key, label, initial=len(done) * per_key)
    for start, end in chunks:
        if all(key in done for key in keys[start:end]):
            continue
        for key, record in zip(keys[start:end], compute(start, end), strict=True):
            if key not in done:  # a key already journaled keeps its record (recomputed identically anyway)
                done[key] = record
                if journal:
                    journal.add(journal_key[key], record)
        if journal:
            journal.flush()
        progress.update((end - start) * per_key)
    progress.close()
    if journal:
        journal.retain(set(journal_key.values()))
    return done
