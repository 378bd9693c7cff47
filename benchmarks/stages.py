"""Every stage's wall seconds and peak RSS on a forced full run, and the no-op `dvc repro` time.

Copies the project (the files git would commit) into a fresh folder, applies a profile if asked (the default:
none, i.e. the embedded CPU default), runs `dvc repro -f`, and reads what each stage's own `mascot` process
recorded (`MASCOT_STAGE_STATS`: its wall time and its peak RSS, and its children's: a training stage's DDP
ranks). Then `dvc repro` with nothing changed, three times (target <= 3 s).

    python benchmarks/stages.py                 # the embedded default (about an hour on 2 cores)
    python benchmarks/stages.py --profile tiny  # the tiny profile (minutes)
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


def run(cmd: str, cwd: Path, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, shell=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds, proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="apply profiles/NAME.yaml first (default: none)")
    parser.add_argument("--workdir", default=None, help="where to make the copy (default: a new temporary folder)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mascot-stages-")) / "repo"
    work.mkdir(parents=True)
    from mascot.io import copy_tracked_files

    copy_tracked_files(ROOT, work)
    stats = work.parent / "stage_stats.jsonl"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
           "HF_HUB_OFFLINE": "1", "MASCOT_STAGE_STATS": str(stats), "MASCOT_RESUME_DIR": str(work / ".mascot/resume")}
    run("git init -q && git add -A && git -c user.email=b@b -c user.name=b commit -qm bench", work, env)
    if args.profile:
        run(f"mascot profile {args.profile}", work, env)
    total, out = run("dvc repro -f", work, env)
    order = re.findall(r"Running stage '([^']+)'", out)
    records = [json.loads(line) for line in stats.read_text().splitlines()]
    by_stage = {r["command"].split()[-1]: r for r in records}  # `mascot <stage>`; a relaunch's ranks come after
    noop = [run("dvc repro", work, {**env, "MASCOT_STAGE_STATS": ""})[0] for _ in range(3)]

    print(f"# stages, {datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores, "
          f"{'GPU' if shutil.which('nvidia-smi') else 'no GPU'}; `dvc repro -f` on "
          f"{'profile ' + args.profile if args.profile else 'the embedded default'}")
    print("| stage | wall s | peak RSS MB | children's peak RSS MB |\n| --- | ---: | ---: | ---: |")
    for stage in order:
        r = by_stage.get(stage, {})
        print(f"| {stage} | {r.get('wall_s', float('nan')):.1f} | {r.get('peak_rss_mb', float('nan')):.0f} "
              f"| {r.get('peak_rss_children_mb', float('nan')):.0f} |")
    print(f"| **all (`dvc repro -f`)** | {total:.1f} | | |")
    print(f"\nno-op `dvc repro`: median {statistics.median(noop):.2f} s of {', '.join(f'{x:.2f}' for x in noop)} "
          "(target <= 3 s)")


if __name__ == "__main__":
    main()
