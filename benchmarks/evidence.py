"""`make evidence`: the evidence profile (profiles/evidence.yaml) end to end in its own copy of the pipeline.

    python benchmarks/evidence.py [--workdir runs/evidence] [--report-only]

The first call copies the repository's tracked files into WORKDIR (a git + DVC repo of its own, so the
user's params.yaml and outputs are untouched) and applies `mascot profile evidence`; every call then runs
`dvc repro` there, which skips what is done (and each stage resumes its own journal), so an interrupted run
goes on where it stopped. DVC's output is shown as it comes; each stage's wall time goes to
WORKDIR/reports/evidence_times.json (one entry per attempt), the peak memory of the largest process to the
same file, and the report (benchmarks/evidence_report.py) to WORKDIR/reports/evidence.md.
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STAGE = re.compile(r"^Running stage '([^']+)'")
from mascot.ops.processes import stop_group  # noqa: E402  (after the path: the checkout's own mascot)


def prepare_workdir(workdir: Path) -> dict:
    """The run's environment; on the first call, the copy and the profile (a marker says both are done)."""
    from benchmarks.pipeline_copy import fresh_pipeline_copy, pipeline_env

    marker = workdir / ".mascot/evidence-profile-applied"
    env = pipeline_env(workdir, TOKENIZERS_PARALLELISM="false")
    if marker.exists():
        print(f"evidence: resuming in {workdir} (DVC skips the stages that are done)", flush=True)
        return env
    if workdir.exists() and any(workdir.iterdir()):
        raise SystemExit(f"evidence: {workdir} exists but holds no finished set-up; remove it or pass another --workdir")
    print(f"evidence: a fresh pipeline copy in {workdir}", flush=True)
    fresh_pipeline_copy(ROOT, workdir)
    subprocess.run("mascot profile evidence", shell=True, cwd=workdir, env=env, check=True)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("profiles/evidence.yaml applied\n")
    return env


def run_repro(workdir: Path, env: dict, target: str | None, save=lambda attempt: None,
              cmd: list[str] | None = None) -> dict:
    """`dvc repro` with its output passed through; returns the stages this attempt ran, their seconds, the
    attempt's wall time, its exit code and the largest process's peak memory (GiB). `save` gets the record at
    every stage and at the end, also when the attempt is stopped (SIGTERM or Ctrl-C: the record says
    `interrupted` and the time so far), so that a run resumed over several attempts sums them all."""
    log = (workdir / "reports/evidence_repro.log").open("a")
    start = last = time.time()
    stages: list[dict] = []
    attempt = {"started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)), "exit_code": None,
               "wall_s": 0.0, "peak_rss_gib": None, "stages": stages, "interrupted": False}
    cmd = cmd or ["dvc", "repro"] + ([target] if target else [])
    # its own process group: a stop reaches the stage DVC runs too (DVC exits on SIGTERM and leaves its stage
    # running, which then holds the repo's lock and both cores)
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            if m := STAGE.match(line):
                now = time.time()
                if stages:
                    stages[-1]["seconds"] = round(now - last, 1)
                stages.append({"stage": m.group(1), "seconds": None})
                last = now
                save({**attempt, "wall_s": round(now - start, 1)})
        attempt["exit_code"] = proc.wait()
    except KeyboardInterrupt:
        attempt["interrupted"] = True
        # SIGTERM to DVC and its stage (which keeps its journal and checkpoints), SIGKILL after a minute
        stop_group(proc.pid, grace_s=60, reap=proc.poll)
        attempt["exit_code"] = proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        end = time.time()
        if stages:
            stages[-1]["seconds"] = round(end - last, 1)
        log.close()
        # ru_maxrss of the children: the largest resident set of any process this one waited for (in KiB on Linux)
        # a stopped attempt's stage was killed before DVC waited for it, so its memory is not counted: unknown
        attempt["peak_rss_gib"] = None if attempt["interrupted"] else \
            round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2)
        attempt["wall_s"] = round(end - start, 1)
        save(attempt)
    return attempt


def _stop(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends an attempt the way Ctrl-C does: recorded, then stopped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="runs/evidence")
    ap.add_argument("--target", default=None, help="a stage to stop at (default: the whole pipeline)")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    workdir = Path(args.workdir).resolve()
    env = prepare_workdir(workdir)
    (workdir / "reports").mkdir(exist_ok=True)
    from evidence_report import STAGE_STATS  # benchmarks/, on the path as this script's folder

    env["MASCOT_STAGE_STATS"] = str(workdir / STAGE_STATS)  # each stage's peak, kept also when an attempt is stopped
    times_path = workdir / "reports/evidence_times.json"
    attempts = json.loads(times_path.read_text())["attempts"] if times_path.exists() else []
    code = 0
    if not args.report_only:
        def save(record: dict) -> None:
            times_path.write_text(json.dumps({"attempts": attempts + [record]}, indent=2) + "\n")

        attempt = run_repro(workdir, env, args.target, save)
        attempts.append(attempt)
        if attempt["interrupted"]:
            print(f"evidence: stopped after {attempt['wall_s']:.0f} s (recorded in {times_path}); run it again to "
                  "go on where it stopped", flush=True)
            return 130
        code = attempt["exit_code"]
        print(f"evidence: dvc repro exited {code} after {attempt['wall_s']:.0f} s; peak memory "
              f"{attempt['peak_rss_gib']} GiB (times: {times_path})", flush=True)
    from evidence_report import write_report

    out = write_report(workdir, attempts)
    print(f"evidence: report -> {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
