"""`mascot profile NAME`: merge profiles/NAME.yaml into params.yaml (comments kept), then validate."""
from __future__ import annotations

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
    yaml = YAML()
    params = yaml.load(Path(params_path).read_text())
    merged = deep_merge(params, YAML(typ="safe").load(profile_path.read_text()) or {})
    parse_params(YAML(typ="safe").load(_dump(yaml, merged)), f"{params_path} + {profile_path}")
    Path(params_path).write_text(_dump(yaml, merged))


def _dump(yaml, data) -> str:
    import io

    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def main(name: str, params_path: str = "params.yaml") -> None:
    apply_profile(name, params_path)
    print(f"params.yaml: profile '{name}' applied")
