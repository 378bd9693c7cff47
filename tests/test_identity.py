"""A model folder's identity is its content, not the environment it was built in (mascot/llm/identity.py)."""
import json
import os
import subprocess
import sys

BUILD = """
import sys
from pathlib import Path
from mascot.config import BaseModelParams
from mascot.llm.base_model import run_base_model
run_base_model(BaseModelParams(source="path", path=sys.argv[1], out_dir=sys.argv[2]), [])
"""


def _build(source, out, offline: bool, repo_root) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo_root), env.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-c", BUILD, str(source), str(out)], env=env, check=True, capture_output=True,
                   timeout=300)


def test_one_source_built_in_two_environments_is_one_folder_with_one_identity(tiny_model_dir, tmp_path, repo_root):
    """transformers records how a tokenizer was loaded (`local_files_only` follows HF_HUB_OFFLINE) in the
    tokenizer_config.json it saves: the model stages strip it, so both builds write the same bytes."""
    from mascot.llm.identity import folder_digest

    online, offline = tmp_path / "online", tmp_path / "offline"
    _build(tiny_model_dir, online, False, repo_root)
    _build(tiny_model_dir, offline, True, repo_root)
    files = sorted(p.name for p in online.iterdir())
    assert files == sorted(p.name for p in offline.iterdir())
    for name in files:
        assert (online / name).read_bytes() == (offline / name).read_bytes(), name
    config = json.loads((offline / "tokenizer_config.json").read_text())
    assert "local_files_only" not in config and "is_local" not in config
    assert folder_digest(online, tmp_path / "cache.json") == folder_digest(offline, tmp_path / "cache.json")


def test_a_folder_built_before_keeps_its_identity_and_the_weights_still_count(tiny_model_dir, tmp_path):
    """A folder an earlier build left with the runtime keys (either value) has the identity of one built now;
    a change to a setting or to the weights is still another identity."""
    import shutil

    from mascot.llm.identity import folder_digest, strip_runtime_keys

    cache = tmp_path / "cache.json"
    now = tmp_path / "now"
    shutil.copytree(tiny_model_dir, now)
    strip_runtime_keys(now)
    for value in (True, False):
        old = tmp_path / f"old-{value}"
        shutil.copytree(now, old)
        config = json.loads((old / "tokenizer_config.json").read_text())
        (old / "tokenizer_config.json").write_text(json.dumps({**config, "local_files_only": value, "is_local": True}))
        assert folder_digest(old, cache) == folder_digest(now, cache)
    other = tmp_path / "other-setting"
    shutil.copytree(now, other)
    config = json.loads((other / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 7}))
    assert folder_digest(other, cache) != folder_digest(now, cache)
    weights = tmp_path / "other-weights"
    shutil.copytree(now, weights)
    blob = bytearray((weights / "model.safetensors").read_bytes())
    blob[-1] ^= 1
    (weights / "model.safetensors").write_bytes(bytes(blob))
    assert folder_digest(weights, cache) != folder_digest(now, cache)
