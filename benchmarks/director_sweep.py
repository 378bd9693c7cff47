"""What makes the embedded Director take the paid speaker: a sweep of its GRPO settings on stage 2's positive control
(benchmarks/controls_embedded.py's group-positive: the Qwen speaker, Gemma-3-270m as Director and group reward
model's base), run the project's own way, as queued DVC experiments.

    python benchmarks/director_sweep.py --workdir /tmp/director-sweep                  # every setting below
    python benchmarks/director_sweep.py --workdir /tmp/director-sweep --settings base,lr-1e-3
    python benchmarks/director_sweep.py --workdir /tmp/director-sweep --show           # the table again

The first call builds the control's chain to `promote_group` in WORKDIR/group-positive (resumable), commits it, and
queues one `dvc exp run --queue -n NAME -S ... evaluate_group` per setting; `dvc queue start` runs them one after
another (2 cores), each in its own temporary copy, the registry in the repository's store. Every experiment trains
the Director with the choice probe on (the probability of each agent at the directive's choice point, every
step) and evaluates it against base, random and round-robin Directors on held-out conversations. The table is
`dvc exp show`'s headline columns (the planted speaker's rate and the differences with their intervals and n),
with each experiment's choice probe (first -> last) and sampled choices read from its figures.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
import subprocess
import sys
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.controls_embedded import merge_params, prepared_copy, run  # noqa: E402

# each setting over EMBEDDED_GROUP's Director (24 steps of 2 prompts x 8 directives at 2e-4, temperature 1.0, beta 0,
# TRL's dapo loss, rewards scaled by the group's spread), one lever at a time, then the ones that moved together
SETTINGS = {
    "base": {},
    "lr-1e-3": {"train_director.learning_rate": 1.0e-3},
    "steps-48": {"train_director.max_steps": 48},
    "lr-1e-3-steps-48": {"train_director.learning_rate": 1.0e-3, "train_director.max_steps": 48},
    "gens-16": {"train_director.num_generations": 16, "train_director.prompts_per_step": 1},
    "temperature-0.7": {"train_director.temperature": 0.7},
    "loss-grpo": {"train_director.trainer_args": {"loss_type": "grpo"}},
    "unscaled": {"train_director.trainer_args": {"scale_rewards": "none"}},
    "beta-0.04": {"train_director.beta": 0.04},
    # each group's rows given the agents in turn (mascot/policy/rollout_grammar.py); the control's rollouts are
    # constrained already
    "stratified": {"train_director.explore_choices": "stratified"},
}
PROBE = {"train_director": {"choice_probe": 8}}  # every step, 8 training states (a diagnostic, about 3 s a step)
COLUMNS = ("planted_trained", "planted_vs_base", "planted_vs_base_low", "planted_vs_random", "planted_vs_random_low",
           "planted_vs_random_high", "planted_n", "director_watch_judge")


def set_flags(setting: dict) -> str:
    """`-S` for each of a setting's leaves, as `++key=value` (Hydra's add or override): a key params.yaml does not
    list (train_director.trainer_args, train_director.explore_choices) cannot be overridden plainly. A dict value
    goes in leaf by leaf."""
    import yaml

    def leaves(prefix: str, value):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from leaves(f"{prefix}.{k}", v)
        else:
            yield prefix, value

    flags = []
    for key, value in setting.items():
        for leaf, v in leaves(key, value):
            text = yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("\n...")
            flags.append(f"-S '++{leaf}={text}'")
    return " ".join(flags)


def exp_rows(work: Path, env: dict) -> dict[str, dict]:
    """Each experiment's headline metrics and params, from `dvc exp show --json`."""
    out = subprocess.run("dvc exp show --json", shell=True, cwd=work, env=env, capture_output=True, text=True,
                         check=True).stdout
    rows = {}
    for commit in json.loads(out):
        for exp in (commit.get("experiments") or []):
            for rev in exp.get("revs") or []:
                data = rev.get("data") or {}
                name = data.get("name") or rev.get("name")
                metrics = {k: v for f in (data.get("metrics") or {}).values() for k, v in (f.get("data") or {}).items()}
                rows[name] = {"metrics": metrics, "rev": data.get("rev")}
    return rows


def figures_of(work: Path, rev: str | None, stage: str) -> dict:
    """A figures file of an experiment: its md5 in the experiment commit's dvc.lock, the bytes in DVC's cache."""
    import yaml

    if not rev:
        return {}
    lock = subprocess.run(["git", "show", f"{rev}:dvc.lock"], cwd=work, capture_output=True, text=True)
    if lock.returncode:
        return {}
    rel = f"reports/figures/{stage}.json"
    for out in (yaml.safe_load(lock.stdout).get("stages", {}).get(stage, {}).get("outs") or []):
        if out.get("path") == rel:
            md5 = out["md5"]
            cached = work / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
            return json.loads(cached.read_text()) if cached.exists() else {}
    return {}


def table(work: Path, env: dict, names: list[str]) -> str:
    rows = exp_rows(work, env)
    lines = ["| setting | The Beacon first, trained | trained - base [95%] | trained - random [95%] | n | watch judge "
             "change | choice probe, The Beacon: first -> last | sampled The Beacon, first -> last step |",
             "| --- | ---: | --- | --- | ---: | ---: | --- | --- |"]
    for name in names:
        m = rows.get(name, {}).get("metrics", {})
        if not m:
            lines.append(f"| {name} | not run | | | | | | |")
            continue
        director = figures_of(work, rows[name]["rev"], "train_director")
        first, last = director.get("choice_probe_first") or {}, director.get("choice_probe_last") or {}
        steps = director.get("choices_by_step") or []
        share = [round(s["chosen"].get("The Beacon", 0) / max(1, sum(s["chosen"].values())), 2) for s in steps]
        lines.append(f"| {name} | {m.get('planted_trained')} | {m.get('planted_vs_base')} [{m.get('planted_vs_base_low')}, ...] "
                     f"| {m.get('planted_vs_random')} [{m.get('planted_vs_random_low')}, {m.get('planted_vs_random_high')}] "
                     f"| {m.get('planted_n')} | {m.get('director_watch_judge')} | {first.get('The Beacon')} -> "
                     f"{last.get('The Beacon')} | {share[0] if share else '-'} -> {share[-1] if share else '-'} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/tmp/director-sweep")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--show", action="store_true", help="print the table of the experiments run so far")
    args = ap.parse_args()
    names = args.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise SystemExit(f"--settings: unknown {unknown}; known: {', '.join(SETTINGS)}")
    root = Path(args.workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    work, env = prepared_copy("group-positive", root)
    if args.show:
        print(table(work, env, names))
        return
    merge_params(work, PROBE)
    run("dvc repro promote_group", work, env)
    # the experiments start from a commit: the params, and dvc.lock naming the outputs DVC's cache holds
    subprocess.run("git add -A && git -c user.email=m@m -c user.name=mascot commit -qm 'director sweep: the control "
                   "to promote_group' || true", shell=True, cwd=work, env=env, check=True)
    done = exp_rows(work, env)
    for name in names:
        if name in done:
            continue
        run(f"dvc exp run --queue -n {name} {set_flags(SETTINGS[name])} evaluate_group", work, env)
    start = time.time()
    subprocess.run("dvc queue start -j 1", shell=True, cwd=work, env=env, check=True)
    while True:
        status = subprocess.run("dvc queue status", shell=True, cwd=work, env=env, capture_output=True, text=True).stdout
        if "Queued" not in status and "Running" not in status:
            break
        time.sleep(30)
    print(status)
    print(f"sweep: {time.time() - start:.0f} s for {len(names)} settings")
    print(table(work, env, names))


if __name__ == "__main__":
    main()
