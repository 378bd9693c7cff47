"""`mascot <stage>`: thin wrappers over the stage functions; dvc.yaml calls these."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import sys
import time

from mascot import reads
from mascot.config import ConfigError, load_params
from mascot.headline import write_headline
from mascot.io import InputError
from mascot.launch import one_write_per_line, relaunch, under_launcher
from mascot.llm.backend import ServerError
from mascot.stage_args import StageArgsError, metrics_file, parse_options, stage_files

STAGES = {
    "base_model": "mascot.stages.base_model",
    "small_model": "mascot.stages.base_model:main_small",
    "prepare": "mascot.stages.prepare",
    "human_set": "mascot.stages.human_set",
    "generate": "mascot.stages.generate",
    "judge_check": "mascot.stages.judge_check",
    "score": "mascot.stages.score",
    "pairs": "mascot.stages.pairs",
    "validate": "mascot.stages.validate",
    "train_rm": "mascot.stages.train_rm",
    "train_grpo": "mascot.stages.train_grpo",
    "evaluate": "mascot.stages.evaluate",
    # stage 2: the Director, one level up
    "episodes": "mascot.stages.episodes",
    "judge_check_group": "mascot.stages.judge_check:main_group",
    "score_group": "mascot.stages.score:main_group",
    "pairs_group": "mascot.stages.pairs:main_group",
    "validate_group": "mascot.stages.validate:main_group",
    "train_group_rm": "mascot.stages.train_rm:main_group",
    "promote_group": "mascot.stages.promote:main_group",
    "train_director": "mascot.stages.train_director",
    "evaluate_group": "mascot.stages.evaluate_group",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stats_file = os.environ.get("MASCOT_STAGE_STATS")
    if not stats_file:
        return _main(argv)

    start, status = time.perf_counter(), None
    try:
        status = _main(argv)
        return status
    finally:
        record_stage_stats(stats_file, argv, time.perf_counter() - start, status)


def record_stage_stats(path: str, argv: list[str], wall_s: float, status) -> None:
    """One JSON line per `mascot` command (benchmarks/stages.py): wall seconds and the peak RSS of this process
    and of its children (an accelerate launch's ranks, a vLLM server started here). Linux gives a child spawned
    by a large process the parent's RSS at that moment (the pages they share), so a children's figure at or
    below this process's own peak may be only that (git, `uname`), and says nothing about real children."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    with open(path, "a") as fh:
        fh.write(json.dumps({"command": " ".join(argv), "wall_s": round(wall_s, 2), "peak_rss_mb": round(own, 1),
                             "peak_rss_children_mb": round(children, 1), "status": status}) + "\n")


# the stages after each data gate, which repeat its judge warning (validate.judge_gate: warn)
AFTER_GATE = {"reports": ("train_rm", "promote", "train_grpo", "evaluate"),
              "reports/group": ("train_group_rm", "promote_group", "train_director", "evaluate_group")}


def repeat_judge_warning(stage: str) -> None:
    for report_dir, stages in AFTER_GATE.items():
        if stage not in stages:
            continue
        try:
            warning = json.loads(open(f"{report_dir}/validation.json").read()).get("judge_warning")
        except (OSError, ValueError):
            warning = None
        if warning:
            print(f"{stage}: WARNING: {warning}")


def report_requests(stage: str) -> None:
    """One line per LLM backend the stage built: where its requests went, by endpoint. With MASCOT_REQUEST_LOG
    set, also a JSON line there (the rehearsal test counts them against the server's own log)."""
    from mascot.llm.factory import request_summary

    summary = request_summary()
    for b in summary:
        where = ", ".join(b["urls"]) or "in-process"
        counts = ", ".join(f"{k} {v}" for k, v in b["requests"].items()) or "none"
        print(f"{stage}: llm requests of {b['key']} ({b['backend']} {b['model']} at {where}): {counts}")
    log = os.environ.get("MASCOT_REQUEST_LOG")
    if log and summary:
        with open(log, "a") as fh:
            fh.write(json.dumps({"stage": stage, "backends": summary}) + "\n")


def build_parser() -> argparse.ArgumentParser:
    """`mascot`'s options: one subcommand per stage, and promote, probe, serve, stack and profile."""
    parser = argparse.ArgumentParser(prog="mascot", description="MASCOT persona reward-model pipeline")
    parser.add_argument("--params", default="params.yaml", help="the parameters file (default: params.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in STAGES:
        sub.add_parser(name, help=f"run the `{name}` stage")
    promote = sub.add_parser("promote", help="the promotion gate (no options), or move an alias by hand")
    promote.add_argument("--version", help="move the alias to this registered version (promotion or rollback)")
    promote.add_argument("--alias", default=None, help="which alias (default: promote.alias, e.g. champion)")
    promote.add_argument("--reason", default="", help="why; recorded as a version tag")
    promote.add_argument("--model", default=None, help="with --version: the registered model (default: "
                         "train_rm.registered_model; e.g. mascot-group-rm)")
    promote.add_argument("--from-experiment", default=None, metavar="NAME",
                         help="make the version a DVC experiment's gate promoted the team's: `dvc exp apply NAME`, "
                              "then the gate decides again outside the experiment and moves the alias")
    probe = sub.add_parser("probe", help="score the fixed probe texts with a registered reward model (round-trip check)")
    probe.add_argument("--uri", default=None, help="default: models:/<train_rm.registered_model>@<promote.alias>")
    sub.add_parser("serve", help="start vLLM's OpenAI-compatible server (see `mascot serve --help`)")
    sub.add_parser("stack", help="the team tracking stack: up | down | status (see `mascot stack --help`)")
    prof = sub.add_parser("profile", help="merge profiles/NAME.yaml into the params file (tiny, real, ...); several "
                          "compose in the order given (`mascot profile real rehearsal`)")
    prof.add_argument("names", nargs="+", metavar="name")
    return parser


def _main(argv: list[str]) -> int:
    # a subcommand's own module loads for that subcommand only: what this module imports at the top is code every
    # stage runs, and so in every stage's DVC dependencies (mascot/stage_deps.py)
    if argv[:1] == ["serve"]:  # its own options; no params.yaml needed
        from mascot.ops.serve import main as serve_main

        return serve_main(argv[1:])
    if argv[:1] == ["stack"]:  # the team tracking stack; no params.yaml needed
        from mascot.ops.stack import main as stack_main

        return stack_main(argv[1:])
    # no HF_HUB_OFFLINE here: only the base_model/small_model stages' hub source talks to a hub, and every other
    # stage reads local folders (the embedded default is offline because its sources are local)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    # a stage's files come as options its function names (mascot/stage_args.py): checked once it is loaded
    args, extra = parser.parse_known_args(argv)
    by_hand = args.command == "promote" and (args.version or args.from_experiment)
    if extra and (by_hand or not (args.command in STAGES or args.command == "promote")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        args.files = parse_options(extra, f"mascot {args.command}")
    except StageArgsError as exc:
        parser.error(str(exc))

    from mlflow.exceptions import MlflowException

    try:
        return run_command(args, argv, parser)
    except (ConfigError, InputError, StageArgsError) as exc:
        print(f"mascot {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MlflowException as exc:
        print(mlflow_error(args.command, exc), file=sys.stderr)
        return 4
    except ServerError as exc:
        print(f"mascot {args.command}: error: {exc}\nEvery finished record is kept in the stage's journal "
              f"(.mascot/resume/); rerun the stage to resume once the server answers.", file=sys.stderr)
        return 3


def run_command(args, argv: list[str], parser: argparse.ArgumentParser) -> int:
    """One parsed command: a profile, the probe, the promotion gate (or a move by hand), or a stage."""
    if args.command == "profile":
        from mascot.profiles import main as profile_main

        profile_main(args.names, args.params)
        return 0
    params = load_params(args.params)
    if args.command in STAGES or (args.command == "promote" and not (args.version or args.from_experiment)):
        reads.start(args.command)  # with MASCOT_RECORD_READS set: what the stage reads (mascot/reads.py)
    if args.command == "probe":
        from mascot.stages.promote import probe_main

        probe_main(params, args.uri)
        return 0
    if args.command == "promote":
        from mascot.stages import promote as promote_mod

        if args.from_experiment:
            if args.version:
                parser.error("promote: --from-experiment and --version are two ways to name the version; give one")
            promote_mod.promote_from_experiment(params, args.from_experiment)
        elif args.version:
            if not args.reason:
                parser.error("promote --version needs --reason (it is recorded on the version)")
            group = args.model is not None and args.model == params.train_group_rm.registered_model
            default_alias = (params.promote_group if group else params.promote).alias
            promote_mod.promote_by_hand(params, args.version, args.alias or default_alias, args.reason, args.model)
        else:
            files = stage_files(promote_mod.main, "promote", args.files)
            promote_mod.main(params, **files)
            write_stage_headline("promote", files)
        return 0
    module, _, function = STAGES[args.command].partition(":")
    stage = getattr(importlib.import_module(module), function or "main")
    files = stage_files(stage, args.command, args.files)
    status = relaunch(args.command, params, argv)
    if status is not None:  # the stage ran under a launcher, in processes of its own
        if status == 0:
            write_stage_headline(args.command, files)
        return status
    if under_launcher():
        one_write_per_line()
    stage(params, **files)
    if not under_launcher():  # the headline file: what dvc metrics and dvc exp show list
        write_stage_headline(args.command, files)
    report_requests(args.command)
    repeat_judge_warning(args.command)
    return 0


def write_stage_headline(command: str, files: dict[str, str]) -> None:
    """The headline file dvc.yaml's `metrics:` declares, from the figures file the stage was handed."""
    write_headline(command, files["figures_path"], metrics_file(command))


def mlflow_error(command: str, exc) -> str:
    """An MLflow failure in words: the server, its error code, and what to do about it."""
    import mlflow

    first = str(exc).strip().splitlines()[0][:600] if str(exc).strip() else type(exc).__name__
    code = getattr(exc, "error_code", "")
    hint = {"PERMISSION_DENIED": "your MLflow user lacks the permission this needs (ask an admin to grant it)",
            "UNAUTHENTICATED": "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or ~/.mlflow/credentials)"
            }.get(code, "if the server is down, start it (`mascot stack up`) and rerun: a half-registered "
                  "version is tagged abandoned and never promoted")
    return f"mascot {command}: error: MLflow at {mlflow.get_tracking_uri()} [{code or 'error'}]: {first}\n{hint}"

if __name__ == "__main__":
    sys.exit(main())
