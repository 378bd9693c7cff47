"""What computed a record: the content identity of a model folder, so that a journal never hands back another
model's outputs.

A path names a place, not weights: `models/base` holds whatever `base_model` last wrote there (another
`source`, a re-conversion, a new hub revision). `folder_digest` hashes every file of the folder (weights,
config, tokenizer, chat template), a config file as what it says, not as the process that wrote it recorded it:
transformers writes how a tokenizer was loaded (`local_files_only`, which follows HF_HUB_OFFLINE, and `is_local`)
into the `tokenizer_config.json` it saves, so one source converted in two shells gave two folders of identical
weights and two identities, and every adapter trained on one was refused on the other. Those keys are left out
of the digest (`RUNTIME_KEYS`), and the model stages no longer write them (`strip_runtime_keys`). Hashing gigabytes costs seconds, so a digest is remembered under the files'
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
DIGEST_RULE = 2  # in the cache key: a digest remembered under the rule before configs were read as settings is not reused


# arguments of the call that loaded a model or tokenizer, not properties of it, that a saved config may carry
RUNTIME_KEYS = frozenset({"local_files_only", "is_local", "cache_dir", "force_download", "proxies", "token",
                          "use_auth_token", "revision", "subfolder", "_commit_hash", "trust_remote_code",
                          "resume_download", "gguf_file", "_from_auto", "_from_pipeline", "name_or_path"})
CONFIG_FILES = ("tokenizer_config.json", "config.json", "generation_config.json", "special_tokens_map.json",
                "processor_config.json", "preprocessor_config.json")


def config_without_runtime(data: dict) -> dict:
    return {k: v for k, v in data.items() if k not in RUNTIME_KEYS}


def strip_runtime_keys(folder: str | Path) -> list[str]:
    """Rewrite the folder's config files without `RUNTIME_KEYS`, so that the same source gives the same bytes
    whatever the environment it was built in; returns the keys it removed."""
    removed = []
    for name in CONFIG_FILES:
        path = Path(folder) / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        if isinstance(data, dict) and RUNTIME_KEYS & data.keys():
            removed += sorted(RUNTIME_KEYS & data.keys())
            path.write_text(json.dumps(config_without_runtime(data), indent=2, ensure_ascii=False) + "\n")
    return removed


def _content(path: Path) -> bytes | None:
    """A config file's content as its settings (runtime keys out, keys sorted); None: hash the bytes."""
    if path.name not in CONFIG_FILES:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return json.dumps(config_without_runtime(data), sort_keys=True, ensure_ascii=False).encode()


def _stamp(folder: Path) -> list:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [[str(p.relative_to(folder)), (st := p.stat()).st_size, st.st_mtime_ns, st.st_ino] for p in files]


def _hash_files(folder: Path, stamp: list) -> str:
    digest = hashlib.sha256()
    for rel, size, *_ in stamp:
        content = _content(folder / rel) if "/" not in rel else None
        if content is not None:  # a config: its settings, whatever whitespace or runtime keys its writer added
            digest.update(f"{rel}\0config\0".encode())
            digest.update(hashlib.sha256(content).digest())
            continue
        digest.update(f"{rel}\0{size}\0".encode())
        with (folder / rel).open("rb") as fh:
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()[:16]


def folder_digest(folder: str | Path, cache_file: Path | None = None) -> str:
    """sha256 over every file's relative path, size and content, a top-level config file's by its settings without
    `RUNTIME_KEYS` (16 hex digits); cached by the files' stamps."""
    folder = Path(folder).resolve()
    cache_file = cache_file or DIGEST_CACHE
    stamp = _stamp(folder)
    key = hashlib.sha256(json.dumps([DIGEST_RULE, str(folder), stamp]).encode()).hexdigest()
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
