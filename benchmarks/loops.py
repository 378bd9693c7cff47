"""The two clocks of this project side by side, a commit against the one before: the embedded default's stage
times (`dvc repro -f`, install excluded) and the tests' times (CI's slowest tests and modules). A benchmark, not a
test: each side runs in a fresh copy, one after the other, and a figure is only worth comparing within one call.

    python benchmarks/loops.py stages --workdir /tmp/loops              # HEAD~1 against the working tree
    python benchmarks/loops.py tests --workdir /tmp/loops --before 72f7b0c --after HEAD
    python benchmarks/loops.py tests --workdir /tmp/loops -m integration   # the slow half alone
    python benchmarks/loops.py show --workdir /tmp/loops                # both tables again, from what was saved

`--after` defaults to the working tree (what this checkout would commit), `--before` to HEAD~1. A side that was
already run in `--workdir` (its result file exists) is read, not run again (`--rerun` runs it anyway). The tests
run with this checkout's virtual environments (`.venv`, and `.venv-vllm` for the real server's tests) and each
copy's own code.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.pipeline_copy import copy_tracked_files, pipeline_env  # noqa: E402
from benchmarks.stages import run_stages  # noqa: E402


def _side(workdir: Path, kind: str, label: str) -> Path:
    return workdir / f"{kind}-{label.replace('/', '_').replace('~', '-')}"


def _both_sides(workdir: Path, kind: str, before: str, after: str | None, rerun: bool, run) -> dict:
    """Each side's saved `<kind>.json`, or `run(side_folder, rev)` where there is none (or `rerun`)."""
    results = {}
    for label, rev in (("before", before), ("after", after)):
        side = _side(workdir, kind, rev or "worktree")
        if (side / f"{kind}.json").exists() and not rerun:
            results[label] = json.loads((side / f"{kind}.json").read_text())
        else:
            results[label] = run(side, rev)
    return results


def stages(workdir: Path, before: str, after: str | None, rerun: bool) -> dict:
    def run(side: Path, rev: str | None) -> dict:
        if side.exists():
            raise SystemExit(f"{side} holds an unfinished run: remove it, or give another --workdir")
        return run_stages(side, rev)
    return _both_sides(workdir, "stages", before, after, rerun, run)


def print_stages(results: dict) -> None:
    before, after = results["before"], results["after"]
    print(f"# the embedded default, `dvc repro -f` (install excluded), {after['date']}, {after['host']}, "
          f"{after['cores']} cores\n# before: {before['label']}; after: {after['label']}")
    print("| stage | before s | after s | after - before s |\n| --- | ---: | ---: | ---: |")
    walls = {label: {} for label in results}
    for label, result in results.items():
        for row in result["stages"]:  # a stage run twice (a relaunch's ranks) counts its first process
            walls[label].setdefault(row["stage"], row["wall_s"])
    order = list(walls["after"]) + [s for s in walls["before"] if s not in walls["after"]]
    for stage in order:
        b, a = walls["before"].get(stage), walls["after"].get(stage)
        diff = f"{a - b:+.1f}" if a is not None and b is not None else ""
        print(f"| {stage} | {'' if b is None else f'{b:.1f}'} | {'' if a is None else f'{a:.1f}'} | {diff} |")
    b_sum, a_sum = (sum(walls[k].values()) for k in ("before", "after"))
    print(f"| stages' own time | {b_sum:.1f} | {a_sum:.1f} | {a_sum - b_sum:+.1f} |")
    failed = {k: " (failed)" if results[k]["rc"] else "" for k in results}
    print(f"| **`dvc repro -f`** | **{before['total_s']:.1f}**{failed['before']} | **{after['total_s']:.1f}**"
          f"{failed['after']} | {after['total_s'] - before['total_s']:+.1f} |")


def tests(workdir: Path, before: str, after: str | None, rerun: bool, marker: str | None, keyword: str | None) -> dict:
    return _both_sides(workdir, "tests", before, after, rerun, lambda side, rev: run_tests(side, rev, marker, keyword))


def run_tests(side: Path, rev: str | None, marker: str | None, keyword: str | None) -> dict:
    """pytest in a fresh copy of the tree (its own code and tests), with this checkout's environments; each test's
    time from the JUnit report (setup, call and teardown: a module fixture's cost lands on its first test)."""
    repo = side / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    if rev:
        subprocess.run(f"git clone -q {ROOT} {repo} && git -C {repo} checkout -q {rev}", shell=True, check=True)
    else:
        copy_tracked_files(ROOT, repo)
    for venv in (".venv", ".venv-vllm"):  # the tests look for the serving environment beside themselves
        if (ROOT / venv).exists() and not (repo / venv).exists():
            (repo / venv).symlink_to(ROOT / venv)
    env = pipeline_env(repo)
    env.pop("MASCOT_RESUME_DIR", None)
    report = side / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"--junitxml={report}",
           "-o", "junit_duration_report=total", "-o", "junit_family=xunit1"]
    cmd += ["-m", marker] if marker else []
    cmd += ["-k", keyword] if keyword else []
    print(f"running {' '.join(cmd[2:])} in {repo} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (side / "pytest.log").write_text(proc.stdout + proc.stderr)
    cases = []
    for case in ET.parse(report).getroot().iter("testcase") if report.exists() else []:
        outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else \
            "skipped" if case.find("skipped") is not None else "passed"
        cases.append({"test": f"{case.get('file') or case.get('classname')}::{case.get('name')}",
                      "module": case.get("file") or case.get("classname", "").replace(".", "/") + ".py",
                      "seconds": float(case.get("time") or 0), "outcome": outcome})
    result = {"rev": rev or "the working tree", "wall_s": round(wall, 1), "rc": proc.returncode, "cases": cases,
              "summary": (proc.stdout.strip().splitlines() or [""])[-1]}
    (side / "tests.json").write_text(json.dumps(result, indent=2))
    return result


def print_tests(results: dict, top: int) -> None:
    before, after = results["before"], results["after"]
    counts = {k: {o: sum(c["outcome"] == o for c in r["cases"]) for o in ("passed", "failed", "skipped")}
              for k, r in results.items()}
    print(f"# tests: before {before['rev']} ({before['summary']}), after {after['rev']} ({after['summary']})")
    print("| | before | after |\n| --- | ---: | ---: |")
    print(f"| pytest wall s | {before['wall_s']:.0f} | {after['wall_s']:.0f} |")
    for outcome in ("passed", "failed", "skipped"):
        print(f"| {outcome} | {counts['before'][outcome]} | {counts['after'][outcome]} |")
    for unit in ("module", "test"):
        sums = {k: {} for k in results}
        for k, r in results.items():
            for c in r["cases"]:
                sums[k][c[unit]] = sums[k].get(c[unit], 0.0) + c["seconds"]
        slowest = sorted(set(sums["after"]) | set(sums["before"]),
                         key=lambda x: -max(sums["after"].get(x, 0), sums["before"].get(x, 0)))[:top]
        print(f"\n| {unit} (the {top} slowest of either side) | before s | after s | after - before s |\n"
              "| --- | ---: | ---: | ---: |")
        for name in slowest:
            b, a = sums["before"].get(name), sums["after"].get(name)
            diff = f"{a - b:+.0f}" if a is not None and b is not None else ""
            print(f"| `{name}` | {'' if b is None else f'{b:.0f}'} | {'' if a is None else f'{a:.0f}'} | {diff} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["stages", "tests", "show"])
    parser.add_argument("--workdir", required=True, help="where the copies and their results go (kept)")
    parser.add_argument("--before", default="HEAD~1", help="a commit (default HEAD~1)")
    parser.add_argument("--after", default=None, help="a commit (default: this checkout's working tree)")
    parser.add_argument("--rerun", action="store_true", help="run a side again even if its result is saved")
    parser.add_argument("-m", dest="marker", default=None, help="tests: pytest's -m (e.g. integration)")
    parser.add_argument("-k", dest="keyword", default=None, help="tests: pytest's -k")
    parser.add_argument("--top", type=int, default=10, help="tests: how many of the slowest to list")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    if args.what in ("stages", "show") and (args.what == "stages" or list(workdir.glob("stages-*/stages.json"))):
        print_stages(stages(workdir, args.before, args.after, args.rerun) if args.what == "stages" else
                     saved(workdir, "stages", args))
    if args.what in ("tests", "show") and (args.what == "tests" or list(workdir.glob("tests-*/tests.json"))):
        print_tests(tests(workdir, args.before, args.after, args.rerun, args.marker, args.keyword)
                    if args.what == "tests" else saved(workdir, "tests", args), args.top)


def saved(workdir: Path, kind: str, args) -> dict:
    out = {}
    for label, rev in (("before", args.before), ("after", args.after)):
        path = _side(workdir, kind, rev or "worktree") / f"{kind}.json"
        if not path.exists():
            raise SystemExit(f"{path}: no saved {kind} run for {label} ({rev or 'the working tree'}); run it first")
        out[label] = json.loads(path.read_text())
    return out


if __name__ == "__main__":
    main()
