"""Every stage's wall seconds and peak RSS on a forced full run, and the no-op `dvc repro` time.

Copies the project (the files git would commit) into a fresh folder, applies a profile if asked (the default:
none, i.e. the embedded CPU default), runs `dvc repro -f`, and reads what each stage's own `mascot` process
recorded (`MASCOT_STAGE_STATS`: its wall time and its peak RSS, and its children's: a training stage's DDP
ranks). Then `dvc repro` with nothing changed, three times (target <= 3 s).

    python benchmarks/stages.py                 # the embedded default (about an hour on 2 cores)
    python benchmarks/stages.py --profile tiny  # the tiny profile (minutes)
    python benchmarks/stages.py --rev e950ef2   # the tree of a commit (its own code), for a before/after table
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run(cmd: str, cwd: Path, env: dict) -> tuple[float, str, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, shell=True, capture_output=True, text=True)
    return time.perf_counter() - start, proc.stdout + proc.stderr, proc.returncode


def print_table(label: str, output: str, stats: Path, total: float, failed: bool) -> None:
    """One row per stage that started, in run order, from what each stage's own process recorded."""
    order = re.findall(r"Running stage '([^']+)'", output)
    records = [json.loads(line) for line in stats.read_text().splitlines()] if stats.exists() else []
    by_stage = {r["command"].split()[-1]: r for r in records}  # `mascot <stage>`; a relaunch's ranks come after
    print(f"# stages, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, "
          f"{'GPU' if shutil.which('nvidia-smi') else 'no GPU'}; `dvc repro -f` on {label}")
    print("| stage | wall s | peak RSS MB | children's peak RSS MB, where above the stage's own |\n"
          "| --- | ---: | ---: | ---: |")
    for i, stage in enumerate(order):
        r = by_stage.get(stage)
        mark = " (failed)" if failed and i == len(order) - 1 else ""
        if r is None:  # the stage's process left no record (killed)
            print(f"| {stage}{mark} | no record | | |")
            continue
        # a child spawned by a big process reports the parent's RSS (git, `uname`): only a figure above the
        # stage's own peak is surely real children (DDP ranks, a vLLM server)
        children = r["peak_rss_children_mb"]
        shown = f"{children:.0f}" if children > r["peak_rss_mb"] else ""
        print(f"| {stage}{mark} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | {shown} |")
    print(f"| **all (`dvc repro -f`)** | {total:.1f}{' (failed)' if failed else ''} | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="apply profiles/NAME.yaml first (default: none)")
    parser.add_argument("--workdir", default=None, help="where to make the copy (default: a new temporary folder)")
    parser.add_argument("--rev", default=None, help="run this commit's tree and code instead of the working tree's")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mascot-stages-")) / "repo"
    work.mkdir(parents=True)
    from benchmarks.pipeline_copy import fresh_pipeline_copy

    source = ROOT
    if args.rev:
        source = work.parent / "source"
        subprocess.run(f"git clone -q {ROOT} {source} && git -C {source} checkout -q {args.rev}", shell=True,
                       check=True)
    stats = work.parent / "stage_stats.jsonl"
    env = fresh_pipeline_copy(source, work, MASCOT_STAGE_STATS=str(stats))  # the copy's own code runs
    label = f"profile {args.profile}" if args.profile else "the embedded default"
    if args.rev:
        label += f" at {args.rev}"
    if args.profile:
        _, out, rc = run(f"mascot profile {args.profile}", work, env)
        if rc:
            raise SystemExit(f"mascot profile {args.profile} failed ({rc}):\n{out[-3000:]}")
    print(f"running `dvc repro -f` in {work} ...", file=sys.stderr, flush=True)
    total, out, rc = run("dvc repro -f", work, env)
    print_table(label, out, stats, total, failed=bool(rc))
    if rc:  # the partial table above, then why, and a failing exit
        print(f"\n`dvc repro -f` failed ({rc}); its last output:\n{out[-3000:]}", file=sys.stderr)
        raise SystemExit(1)
    noop = []
    for _ in range(3):
        seconds, out, rc = run("dvc repro", work, {**env, "MASCOT_STAGE_STATS": ""})
        if rc or "Running stage" in out:
            raise SystemExit(f"the no-op `dvc repro` ran something or failed ({rc}):\n{out[-3000:]}")
        noop.append(seconds)
    print(f"\nno-op `dvc repro`: median {statistics.median(noop):.2f} s of {', '.join(f'{x:.2f}' for x in noop)} "
          "(target <= 3 s)")


if __name__ == "__main__":
    main()
