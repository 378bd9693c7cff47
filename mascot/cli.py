"""`mascot <stage>`: thin wrappers over the stage functions; dvc.yaml calls these."""
from __future__ import annotations

import argparse
import os
import sys

STAGES = {
    "base_model": "mascot.llm.base_model",
    "prepare": "mascot.data.prepare",
    "generate": "mascot.annotate.generate",
    "score": "mascot.annotate.score",
    "pairs": "mascot.pairs",
    "validate": "mascot.validate.stage",
}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = argparse.ArgumentParser(prog="mascot", description="MASCOT persona reward-model pipeline")
    parser.add_argument("--params", default="params.yaml", help="the parameters file (default: params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in STAGES:
        sub.add_parser(name, help=f"run the `{name}` stage")
    prof = sub.add_parser("profile", help="merge profiles/NAME.yaml into the params file (tiny, real, ...)")
    prof.add_argument("name")
    args = parser.parse_args(argv)

    import importlib

    from mascot.config import ConfigError, load_params
    from mascot.io import InputError

    try:
        if args.command == "profile":
            from mascot.profiles import main as profile_main

            profile_main(args.name, args.params)
            return 0
        params = load_params(args.params)
        importlib.import_module(STAGES[args.command]).main(params)
    except (ConfigError, InputError) as exc:
        print(f"mascot {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
