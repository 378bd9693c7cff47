"""What computed a record: the content identity of a model folder, so that a journal never hands back another
model's outputs.

A path names a place, not weights: `models/base` holds whatever `base_model` last wrote there (another
`source`, a re-conversion, a new hub revision). `folder_digest` hashes every file of the folder (weights,
config, tokenizer, chat template). Hashing gigabytes costs seconds, so a digest is remembered under the files'
(path, size, mtime, inode) in `.mascot/model_digests.json`: a file rewritten in place gets a new mtime, hence
a new hash.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mascot.resume import RESUME_DIR

DIGEST_CACHE = RESUME_DIR.parent / "model_digests.json"


def _stamp(folder: Path) -> list:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [[str(p.relative_to(folder)), (st := p.stat()).st_size, st.st_mtime_ns, st.st_ino] for p in files]


def _hash_files(folder: Path, stamp: list) -> str:
    digest = hashlib.sha256()
    for rel, size, *_ in stamp:
        digest.update(f"{rel}\0{size}\0".encode())
        with (folder / rel).open("rb") as fh:
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()[:16]


def folder_digest(folder: str | Path, cache_file: Path | None = None) -> str:
    """sha256 over every file's relative path, size and content (16 hex digits); cached by the files' stamps."""
    folder = Path(folder).resolve()
    cache_file = cache_file or DIGEST_CACHE
    stamp = _stamp(folder)
    key = hashlib.sha256(json.dumps([str(folder), stamp]).encode()).hexdigest()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    digest = _hash_files(folder, stamp)
    cache[key] = digest
    try:  # a cache that cannot be written costs time, never correctness
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_file)
    except OSError:
        pass
    return digest


def local_identity(folder: str | Path, dtype: str, adapter: str | Path | None = None) -> dict:
    """An in-process model: its weights' digest, the dtype it computes in, and a merged adapter's digest."""
    ident = {"backend": "local", "weights": folder_digest(folder), "dtype": dtype}
    if adapter:
        ident["adapter"] = folder_digest(adapter)
    return ident
