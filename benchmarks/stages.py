"""Every stage's wall seconds and peak RSS on a forced full run, and the no-op `dvc repro` time.

Copies the project (the files git would commit) into a fresh folder, applies a profile if asked (the default:
none, i.e. the embedded CPU default), runs `dvc repro -f`, and reads what each stage's own `mascot` process
recorded (`MASCOT_STAGE_STATS`: its wall time and its peak RSS, and its children's: a training stage's DDP
ranks). Then `dvc repro` with nothing changed, three times (target <= 3 s).

    python benchmarks/stages.py                 # the embedded default (about an hour on 2 cores)
    python benchmarks/stages.py --profile tiny  # the tiny profile (minutes)
    python benchmarks/stages.py --rev e950ef2   # the tree of a commit (its own code), for a before/after table
    python benchmarks/stages.py --show --workdir DIR   # the table of an earlier run again

`benchmarks/loops.py stages` runs two trees (the previous commit's and this one) and sets them side by side.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
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


def stage_rows(stats: Path) -> list[dict]:
    """One row per stage process that recorded itself, in the order they ran (`MASCOT_STAGE_STATS`: `mascot
    <stage> --options...`, its wall time, its peak RSS and its children's)."""
    rows = []
    for line in stats.read_text().splitlines() if stats.exists() else []:
        r = json.loads(line)
        rows.append({"stage": r["command"].split()[0], "wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"],
                     "peak_rss_children_mb": r["peak_rss_children_mb"], "status": r.get("status")})
    return rows


def print_table(result: dict) -> None:
    """The run's stages in run order, from what each stage's own process recorded."""
    print(f"# stages, {result['date']}, {result['host']}, {result['cores']} cores, {result['gpu']}; "
          f"`dvc repro -f` on {result['label']}")
    print("| stage | wall s | peak RSS MB | children's peak RSS MB, where above the stage's own |\n"
          "| --- | ---: | ---: | ---: |")
    for r in result["stages"]:
        # a child spawned by a big process reports the parent's RSS (git, `uname`): only a figure above the
        # stage's own peak is surely real children (DDP ranks, a vLLM server)
        children = r["peak_rss_children_mb"]
        shown = f"{children:.0f}" if children > r["peak_rss_mb"] else ""
        mark = " (failed)" if r.get("status") else ""
        print(f"| {r['stage']}{mark} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} | {shown} |")
    failed = " (failed)" if result["rc"] else ""
    print(f"| **all (`dvc repro -f`)** | {result['total_s']:.1f}{failed} | | |")
    if result.get("noop_s"):
        noop = result["noop_s"]
        print(f"\nno-op `dvc repro`: median {statistics.median(noop):.2f} s of {', '.join(f'{x:.2f}' for x in noop)} "
              "(target <= 3 s)")


def set_params(assignments: list[str], params_path: Path) -> None:
    """KEY=VALUE (a dotted key, a YAML value) into params.yaml, comments kept; the stages validate it when they
    run (a --rev copy's schema may differ from this checkout's)."""
    import yaml
    from ruamel.yaml import YAML

    rt = YAML()
    data = rt.load(params_path.read_text())
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep:
            raise SystemExit(f"--set {assignment!r}: expected KEY=VALUE")
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            if part not in node:
                raise SystemExit(f"--set {assignment!r}: params.yaml has no key {part!r} on the way to {key}")
            node = node[part]
        node[leaf] = yaml.safe_load(value)
    with params_path.open("w") as fh:
        rt.dump(data, fh)


def source_tree(rev: str | None, workdir: Path) -> Path:
    """The tree to run: this checkout's working tree (None), or a clone of it at `rev`."""
    if not rev:
        return ROOT
    source = workdir / "source"
    subprocess.run(f"git clone -q {ROOT} {source} && git -C {source} checkout -q {rev}", shell=True, check=True)
    return source


def run_stages(workdir: Path, rev: str | None = None, profile: str | None = None, sets: list[str] = (),
               noop: bool = True) -> dict:
    """`dvc repro -f` in a fresh copy under `workdir` (of the working tree, or of `rev`, with its own code), then
    the no-op `dvc repro` three times; the result is also written to `workdir/stages.json`."""
    from benchmarks.pipeline_copy import fresh_pipeline_copy

    work = workdir / "repo"
    work.mkdir(parents=True)
    stats = workdir / "stage_stats.jsonl"
    env = fresh_pipeline_copy(source_tree(rev, workdir), work, MASCOT_STAGE_STATS=str(stats))
    label = (f"profile {profile}" if profile else "the embedded default") + (f" at {rev}" if rev else "")
    if profile:
        _, out, rc = run(f"mascot profile {profile}", work, env)
        if rc:
            raise SystemExit(f"mascot profile {profile} failed ({rc}):\n{out[-3000:]}")
    if sets:  # the copy's params.yaml, edited here (a --rev copy's code may not have this helper)
        set_params(list(sets), work / "params.yaml")
        label += " with " + ", ".join(sets)
    print(f"running `dvc repro -f` in {work} ...", file=sys.stderr, flush=True)
    total, out, rc = run("dvc repro -f", work, env)
    (workdir / "repro.log").write_text(out)
    result = {"label": label, "rev": rev, "date": str(datetime.date.today()), "host": platform.node(),
              "cores": os.cpu_count(), "gpu": "GPU" if shutil.which("nvidia-smi") else "no GPU",
              "stages": stage_rows(stats), "total_s": round(total, 1), "rc": rc, "tail": out[-3000:], "noop_s": []}
    if not rc and noop:
        for _ in range(3):
            seconds, out, code = run("dvc repro", work, {**env, "MASCOT_STAGE_STATS": ""})
            if code or "Running stage" in out:
                raise SystemExit(f"the no-op `dvc repro` ran something or failed ({code}):\n{out[-3000:]}")
            result["noop_s"].append(round(seconds, 2))
    (workdir / "stages.json").write_text(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="apply profiles/NAME.yaml first (default: none)")
    parser.add_argument("--workdir", default=None, help="where to make the copy (default: a new temporary folder)")
    parser.add_argument("--rev", default=None, help="run this commit's tree and code instead of the working tree's")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="set a params.yaml key (dotted, YAML value) in the copy after the profile, e.g. "
                             "promote.bar_on=lower_bound; repeatable")
    parser.add_argument("--show", action="store_true", help="print the table of an earlier run in --workdir")
    args = parser.parse_args()
    if args.show:
        print_table(json.loads((Path(args.workdir) / "stages.json").read_text()))
        return
    result = run_stages(Path(args.workdir or tempfile.mkdtemp(prefix="mascot-stages-")), args.rev, args.profile,
                        args.set)
    print_table(result)
    if result["rc"]:  # the partial table above, then why, and a failing exit
        print(f"\n`dvc repro -f` failed ({result['rc']}); its last output:\n{result['tail']}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
