"""`mascot profile NAME`: merge profiles/NAME.yaml into params.yaml (comments kept), then validate."""
from __future__ import annotations

import io
from pathlib import Path

from ruamel.yaml import YAML

from mascot.config import ConfigError, parse_params


def deep_merge(base, override):
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def apply_profile(name: str, params_path: str | Path = "params.yaml", profiles_dir: str | Path = "profiles") -> None:
    profile_path = Path(profiles_dir) / f"{name}.yaml"
    if not profile_path.exists():
        known = ", ".join(sorted(p.stem for p in Path(profiles_dir).glob("*.yaml")))
        raise ConfigError(f"{profile_path}: no such profile (known: {known})")
    merge_params(params_path, YAML(typ="safe").load(profile_path.read_text()) or {}, str(profile_path))


def merge_params(params_path: str | Path, blocks: dict, source: str = "the blocks given") -> None:
    """Merge `blocks` into params.yaml, keeping its comments; the result is validated before it is written."""
    yaml = YAML()
    merged = deep_merge(yaml.load(Path(params_path).read_text()), blocks)
    parse_params(YAML(typ="safe").load(_dump(yaml, merged)), f"{params_path} + {source}")
    Path(params_path).write_text(_dump(yaml, merged))


def _dump(yaml, data) -> str:
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def main(names: list[str] | str, params_path: str = "params.yaml") -> None:
    """Apply profiles in order, each on top of the last (`real rehearsal`: the real road at rehearsal sizes).
    Nothing is written unless every one applies and the result validates."""
    names = [names] if isinstance(names, str) else list(names)
    original = Path(params_path).read_text()
    try:
        for name in names:
            apply_profile(name, params_path)
    except BaseException:
        Path(params_path).write_text(original)
        raise
    print(f"{params_path}: profile{'s' if len(names) > 1 else ''} {' + '.join(names)} applied")
