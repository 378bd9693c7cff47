"""The README's main command as a new user runs it: `git clone` of this checkout's committed HEAD, then `make repro`
(install and the embedded CPU default, both stages), timed, with the dice changed where asked.

    python benchmarks/fresh_repro.py --workdir /tmp/fresh-1                              # as shipped
    python benchmarks/fresh_repro.py --workdir /tmp/fresh-2 --set generate.seed=7        # other samples
    python benchmarks/fresh_repro.py --workdir /tmp/fresh-3 --set llm.speaker.dtype=float32 --set llm.judge.dtype=float32

Prints the exit code, the wall time (install included, and `dvc repro` alone), what was varied, every stage's time
and the `promote` and `promote_group` lines, and writes them to WORKDIR/fresh_repro.json. A `--set` is an edit of the
clone's params.yaml (a dotted key, a YAML value), as a user would make it; the clone keeps it uncommitted.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.stages import set_params, stage_rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="an empty folder: the clone goes to WORKDIR/repo")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a params.yaml edit")
    parser.add_argument("--rev", default="HEAD", help="the commit to clone (default: HEAD)")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    repo = workdir / "repo"
    if repo.exists():
        raise SystemExit(f"{repo} exists: give an empty --workdir")
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", args.rev], check=True)
    if args.set:
        set_params(args.set, repo / "params.yaml")
    stats = workdir / "stage_stats.jsonl"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "MASCOT_", "VIRTUAL_ENV"))},
           "MASCOT_STAGE_STATS": str(stats)}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)  # the clone's own
    log = workdir / "make_repro.log"
    print(f"fresh_repro: `make repro` in {repo} (log: {log}) ...", file=sys.stderr, flush=True)
    start = time.time()
    with log.open("w") as fh:
        rc = subprocess.run(["make", "repro"], cwd=repo, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    wall = time.time() - start
    text = log.read_text(errors="replace")
    rows = stage_rows(stats)
    result = {"rev": subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip(),
              "varied": args.set or ["nothing: as shipped"], "rc": rc, "wall_s": round(wall, 1),
              "stages_s": round(sum(r["wall_s"] for r in rows), 1), "stages": rows,
              "promote": [line for line in text.splitlines() if re.match(r"^promote(_group)?: ", line)],
              "reached_evaluate_group": any(r["stage"] == "evaluate_group" and not r["status"] for r in rows)}
    (workdir / "fresh_repro.json").write_text(json.dumps(result, indent=2))
    print(f"# `make repro` from a fresh clone of {result['rev']}: rc {rc}, {wall:.0f} s wall "
          f"({result['stages_s']:.0f} s in the stages' own processes); varied: {', '.join(result['varied'])}")
    print("| stage | wall s | peak RSS MB |\n| --- | ---: | ---: |")
    for r in rows:
        print(f"| {r['stage']}{' (failed)' if r['status'] else ''} | {r['wall_s']:.1f} | {r['peak_rss_mb']:.0f} |")
    for line in result["promote"]:
        print(line)
    if rc:
        print("\n".join(text.splitlines()[-30:]), file=sys.stderr)
        raise SystemExit(rc)


if __name__ == "__main__":
    main()
