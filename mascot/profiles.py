"""`mascot profile NAME`: merge profiles/NAME.yaml into params.yaml (comments kept), then validate."""
from __future__ import annotations

import io
from pathlib import Path

import yaml as safe_yaml
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from mascot.config import ConfigError, parse_params

_INDICATORS = set("\\?[]{},#&*!|>'\"%@`")


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
    yaml = _round_trip()
    merged = deep_merge(yaml.load(Path(params_path).read_text()), _quoted_where_needed(blocks))
    text = _dump(yaml, merged)
    try:  # read back the way the stages read it (PyYAML), so nothing is written that they cannot load
        parse_params(safe_yaml.safe_load(text), f"{params_path} + {source}")
    except safe_yaml.YAMLError as exc:
        raise ConfigError(f"{params_path} + {source}: the merge would not be valid YAML: {exc}") from None
    Path(params_path).write_text(text)


def _quoted_where_needed(value):
    """Strings with YAML indicators or a backslash double-quoted: ruamel writes some of them bare in a flow
    mapping (a regex "\\?"), where PyYAML, which the stages read with, cannot parse them."""
    if isinstance(value, dict):
        return {key: _quoted_where_needed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_quoted_where_needed(item) for item in value]
    if isinstance(value, str) and not isinstance(value, DoubleQuotedScalarString) and _INDICATORS & set(value):
        return DoubleQuotedScalarString(value)
    return value


def _round_trip() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True  # a quoted string read back stays quoted when written again
    return yaml


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
