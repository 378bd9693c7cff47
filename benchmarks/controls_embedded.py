"""The controls (docs/controls.md) on the embedded models: Qwen2.5-Coder-0.5B-Instruct as the speaker and the GRPO
policy, Gemma-3-270m as the reward model's base, through the real chain (DVC, TRL, PEFT, MLflow), in fresh copies.

    python benchmarks/controls_embedded.py [--workdir /tmp/controls-embedded]
        [--kinds positive,negative,length,group-positive,group-negative] [--set KEY=VALUE ...]

The positive control's planted feature here is a question to the seeker ("?" in the reply): the instruct speaker
asks one sometimes, not always (a digit, the tiny models' feature, it almost never writes). The negative is seeded
noise. Each control runs `mascot profile controls control-<kind>` over the CPU default plus the sizes below (the
embedded models cost minutes where the tiny ones cost seconds), then: positive to `evaluate`; negative to
`promote` (which must refuse), then GRPO against it with the gate off (the watch must not say `improving`); length
(`control-length`: the judge pays the question and every word) to `promote`, then GRPO and `evaluate` once per
setting of LENGTH_LEVERS against the same reward model (levers off: the policy must grow and the gain be called
length; levers on: the question's rate must rise, the length must not). group-positive and group-negative are
stage 2's controls (`controls controls-group control-group-<kind>`, then EMBEDDED_GROUP): the Qwen speaker in the
episodes and rollouts, Gemma-3-270m as the group reward model's base and as the Director; positive to
`evaluate_group` (the Director must give The Beacon the floor more often than base and random), negative to
`promote_group` (which must refuse), then the Director against it with the gate off (its watch must not say
`improving`).
A `--set` is a params.yaml edit over every control's blocks (a setting under test, e.g.
`--set train_director.explore_choices=stratified --set train_director.constrain_rollouts=true`); give a setting its
own WORKDIR. A second call in the same WORKDIR resumes (DVC skips the stages that are done). Prints one Markdown table (docs/results.md "Controls on the embedded models") and writes WORKDIR/controls.json.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# over `controls` + `control-<kind>`: the embedded models, sized for about 20 minutes a control on 2 cores
EMBEDDED = {
    "base_model": {"tiny_init_std": None},
    "prepare": {"max_context_tokens": 64,
                "sources": [{"format": "esconv", "path": "data/corpora/esconv-sample.json", "max_queries": 16},
                            {"format": "esconv", "path": "data/corpora/esconv-more.json", "max_queries": 40}]},
    # the speaker asks its question at the end of a reply: 48 tokens let about a quarter of the replies get there
    "generate": {"num_agents_per_query": 8, "max_tokens": 48, "temperature": 1.0, "skip_heldout": True},
    # a rule judge is not an LLM judge to be held to the judge's bars (as profiles/tiny.yaml); what the controls
    # must show is measured after it
    "validate": {"min_judge_accuracy": 0.0, "min_human_agreement": 0.0, "max_constant_group_fraction": 1.0,
                 "judge_gate": "warn"},
    # all 18 layers, as the embedded controls were measured (the CPU default keeps 6: train_rm.keep_layers)
    "train_rm": {"batch_size": 8, "learning_rate": 2.0e-4, "epochs": 2, "eval_steps": 20, "checkpoint_steps": 50,
                 "keep_layers": None,
                 "lora": {"r": 16, "alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}},
    "grpo": {"num_generations": 4, "prompts_per_step": 1, "max_completion_length": 48, "max_steps": 40,
             "learning_rate": 1.0e-4, "lora": {"r": 16, "alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
             "watch": {"every_steps": 20, "probe_queries": 16, "probe_personas": 1, "temperature": 1.0}},
    "evaluate": {"max_queries": 20, "max_tokens": 48, "temperature": 1.0},
}
QUESTION = r"\?"  # the positive control's feature on the embedded speaker: it asks the seeker a question
FEATURE = {"positive": {"score": {"scorer": {"kwargs": {"pattern": QUESTION}}}},
           "negative": {},
           # a question +1, a word +0.05: the speaker's replies run about 10-40 words, so 20 words pay what the
           # question pays and pairs at margin 0.5 are decided by either (neither by almost all)
           "length": {"score": {"scorer": {"kwargs": {"pattern": QUESTION,
                                                      "feature": 1.0, "per_word": 0.05}}}}}
# the length control's GRPO settings, each run against the same promoted reward model
LENGTH_LEVERS = {
    "off": {"grpo": {"length_calibration": {"enabled": False}}},
    "base_policy_fit": {"grpo": {"length_calibration": {"enabled": True, "method": "base_policy_fit"}}},
    "within_group": {"grpo": {"length_calibration": {"enabled": True, "method": "within_group"}}},
}
GATE_OFF = {"promote": {"min_eval_accuracy": 0.0, "require_beat_length_baseline": False, "bar_on": "point",
                        "max_null_p": None}}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
# over `controls controls-group control-group-<kind>` (48 prefixes x 4 branches of one companion turn, a random
# Director in the episodes, the Director's rollouts under the directive grammar, 24 held-out conversations a
# condition): the embedded models in place of the tiny ones, the CPU default's Director base (Gemma-3-270m)
EMBEDDED_GROUP = {
    "base_model": {"tiny_init_std": None},
    "episodes": {"max_tokens": 24},
    # all of Gemma's 18 layers, as when it learned the planted speaker (0.898, 2026-12-04): on the CPU default's
    # first 6 (train_group_rm.keep_layers, 2026-12-06) it ranked the same control's pairs 0.551 [0.392, 0.698]
    "train_group_rm": {"batch_size": 8, "learning_rate": 2.0e-4, "epochs": 3, "eval_steps": 20, "checkpoint_steps": 50,
                       "keep_layers": None, "lora": {"r": 16, "alpha": 32, "target_modules": ATTENTION}},
    # Gemma spends a few characters a token: 96 tokens hold the grammar's longest directive (80 characters of text
    # after the persona's name)
    "train_director": {"base_model": "models/small", "learning_rate": 2.0e-4, "max_steps": 24,
                       "max_completion_length": 96, "rollout_max_tokens": 24,
                       "lora": {"r": 16, "alpha": 32, "target_modules": ATTENTION},
                       "watch": {"every_steps": 12, "probe_queries": 20, "max_tokens": 96}},
    "evaluate_group": {"max_tokens": 24},
}
GROUP_GATE_OFF = {"promote_group": GATE_OFF["promote"]}


def merge_params(work: Path, blocks: dict) -> None:
    from mascot.profiles import merge_params as merge_into

    merge_into(work / "params.yaml", blocks, "the control's blocks")


def run(cmd: str, work: Path, env: dict) -> float:
    start = time.time()
    print(f"[{work.name}] $ {cmd}", flush=True)
    subprocess.run(cmd, shell=True, cwd=work, env=env, check=True)
    return time.time() - start


def metrics(work: Path, name: str) -> dict:
    path = work / "reports" / "figures" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def feature_rates(work: Path, pattern: str) -> dict:
    rx = re.compile(pattern)
    texts = [json.loads(line)["text"] for line in (work / "data/candidates.jsonl").read_text().splitlines()]
    out = {"speaker": round(sum(bool(rx.search(t)) for t in texts) / len(texts), 3)}
    replies = work / "reports/evaluate_replies.jsonl"
    if replies.exists():
        rows = [json.loads(line) for line in replies.read_text().splitlines()]
        for policy in ("base", "grpo"):
            mine = [r for r in rows if r["policy"] == policy]
            out[policy] = round(sum(bool(rx.search(r["text"])) for r in mine) / len(mine), 3) if mine else None
    return out


def prepared_copy(kind: str, root: Path, edits: list[str] = ()) -> tuple[Path, dict]:
    """WORKDIR/KIND with the control's params: a fresh pipeline copy, or the one a run before left. A stage-2
    kind (group-positive) applies its stage-1 control's profile, then the group profiles; `edits` (KEY=VALUE)
    last."""
    from benchmarks.pipeline_copy import fresh_pipeline_copy, pipeline_env
    from benchmarks.stages import set_params

    work = root / kind
    if (work / ".dvc").is_dir():  # a run before: its params again from the copy's own, DVC skips what is done
        env = pipeline_env(work, TOKENIZERS_PARALLELISM="false")
        run("git checkout -q params.yaml", work, env)
    else:
        env = fresh_pipeline_copy(ROOT, work, TOKENIZERS_PARALLELISM="false")
    if kind.startswith("group-"):
        run(f"mascot profile controls control-{kind[6:]} controls-group control-{kind}", work, env)
        merge_params(work, EMBEDDED_GROUP)
    else:
        run(f"mascot profile controls control-{kind}", work, env)
        merge_params(work, {**EMBEDDED, **FEATURE[kind]})
    if edits:
        set_params(list(edits), work / "params.yaml")
    return work, env


def seconds_in_all(work: Path, seconds: dict) -> dict:
    """This call's seconds added to every earlier attempt's: a resumed run reports what the control cost in all."""
    spent_path = work / ".mascot/controls_seconds.json"
    spent = json.loads(spent_path.read_text()) if spent_path.exists() else {}
    spent = {k: spent.get(k, 0) + seconds.get(k, 0) for k in {*spent, *seconds}}
    spent_path.parent.mkdir(parents=True, exist_ok=True)
    spent_path.write_text(json.dumps(spent) + "\n")
    return spent


def length_control(root: Path) -> dict:
    """The length control: one chain to `promote`, then GRPO and `evaluate` per lever setting, each's figures kept
    under WORKDIR/length/levers/NAME (a setting already there is not run again)."""
    work, env = prepared_copy("length", root)
    seconds = {"to_promote": run("dvc repro promote", work, env)}
    rm, promote = metrics(work, "train_rm"), metrics(work, "promote")
    levers = {}
    for name, blocks in LENGTH_LEVERS.items():
        kept = work / "levers" / name
        if not (kept / "evaluate.json").exists():
            merge_params(work, blocks)
            seconds[name] = run("dvc repro evaluate", work, env)
            kept.mkdir(parents=True, exist_ok=True)
            for stage in ("train_grpo", "evaluate"):
                (kept / f"{stage}.json").write_text((work / "reports/figures" / f"{stage}.json").read_text())
        levers[name] = lever_row(kept)
    seconds = seconds_in_all(work, seconds)
    return {"kind": "length", "seconds": {k: round(v) for k, v in seconds.items()},
            **reward_model_row(metrics(work, "pairs"), rm),
            "rm_equal_length": rm.get("eval_accuracy_equal_length"),
            "rm_length_pearson": rm.get("eval_score_length_pearson"),
            "chosen_longer": rm.get("pairs_chosen_longer_fraction"),
            "promoted": promote.get("promoted"), "promote_reason": promote.get("reason"), "levers": levers}


def reward_model_row(pairs: dict, rm: dict) -> dict:
    """The pairs and the reward model's eval figures every control's row starts with (stage 1's or stage 2's)."""
    return {"pairs": pairs.get("pairs"), "train_pairs": rm.get("train_pairs"), "eval_pairs": rm.get("eval_pairs"),
            "rm_accuracy": rm.get("eval_accuracy"),
            "rm_ci": [rm.get("eval_accuracy_ci_low"), rm.get("eval_accuracy_ci_high")],
            "rm_length_baseline": rm.get("eval_length_baseline_accuracy")}


def lever_row(kept: Path) -> dict:
    """One lever setting's GRPO - base figures: words, the question's rate, the judge raw and at equal length."""
    evaluate = json.loads((kept / "evaluate.json").read_text())
    grpo = json.loads((kept / "train_grpo.json").read_text())
    diffs = evaluate["grpo_minus_base"]

    def interval(name: str) -> dict:
        d = diffs.get(name, {})
        return {k: d.get(k) for k in ("diff", "ci_low", "ci_high", "n")}

    eq = diffs["judge_total"].get("equal_length", {})
    return {"words": interval("reply_words"), "feature": interval("planted_feature"),
            "judge": interval("judge_total"),
            "judge_equal_length": {k: eq.get(k) for k in ("mean", "ci_low", "ci_high", "n", "extrapolated")},
            "judge_gain_is": evaluate.get("judge_gain_is"), "watch_verdict": grpo.get("watch_verdict"),
            "calibration": {k: v for k, v in grpo.items() if k.startswith("length_")}}


def group_control(kind: str, root: Path, edits: list[str] = ()) -> dict:
    """A stage-2 control: positive to `evaluate_group`; negative to `promote_group`, then the Director with the gate
    off."""
    work, env = prepared_copy(kind, root, edits)
    positive = kind == "group-positive"
    seconds = {"to_evaluate_group" if positive else "to_promote_group":
               run("dvc repro evaluate_group" if positive else "dvc repro promote_group", work, env)}
    # the decision at the control's own gate, before the negative's gate is opened
    decision = work / ".mascot/promote_group_at_its_gate.json"
    decision.write_text(json.dumps(metrics(work, "promote_group")) + "\n")
    if not positive:
        merge_params(work, GROUP_GATE_OFF)
        seconds["director_gate_off"] = run("dvc repro train_director", work, env)
    return group_figures(kind, work, seconds_in_all(work, seconds))


def group_figures(kind: str, work: Path, seconds: dict) -> dict:
    """A stage-2 control's figures as its repo holds them (this script's, or one of tests/test_controls.py's)."""
    rm, director = metrics(work, "train_group_rm"), metrics(work, "train_director")
    kept = work / ".mascot/promote_group_at_its_gate.json"  # this script's; CI's repo has only the one decision
    promote = json.loads(kept.read_text()) if kept.exists() else metrics(work, "promote_group")
    episodes = [json.loads(line) for line in (work / "data/group/episodes.jsonl").read_text().splitlines()]
    first = [next((t["speaker"] for t in e["turns"] if t["role"] == "agent"), None) for e in episodes if e["valid"]]
    planted = metrics(work, "evaluate_group").get("planted_feature", {})
    persona = planted.get("persona")  # the positive's planted speaker; the negative (noise) plants none
    return {"kind": kind, "seconds": {k: round(v) for k, v in seconds.items()},
            **reward_model_row(metrics(work, "pairs_group"), rm),
            "planted_persona": persona,
            "planted_first_in_episodes": round(first.count(persona) / len(first), 3) if first and persona else None,
            "promoted": promote.get("promoted"), "promote_reason": promote.get("reason"),
            "director_reward": [director.get("reward_first_step"), director.get("reward_last_step")],
            "watch_verdict": director.get("watch_verdict"), "watch_why": director.get("watch_why"),
            "watch_n": director.get("watch_n"),
            "planted_rate": {c: {k: f.get(k) for k in ("mean", "ci_low", "ci_high", "n")}
                             for c, f in planted.get("rate", {}).items()},
            "planted_differences": {other: {k: planted[f"trained_minus_{other}"].get(k)
                                            for k in ("mean", "ci_low", "ci_high", "n", "p_sign")}
                                    for other in ("base", "random") if f"trained_minus_{other}" in planted}}


def group_table(results: list[dict]) -> str:
    lines = ["| control | block pairs (train / eval) | group reward model [95%], length baseline | promotion | "
             "Director's watch | planted speaker first: trained / base / random / round-robin | trained - base [95%], n | "
             "trained - random [95%], n | minutes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for r in results:
        rate = " / ".join(str(r["planted_rate"].get(c, {}).get("mean", "-"))
                          for c in ("trained", "base", "random", "round_robin")) if r["planted_rate"] else "-"
        minutes = f"{sum(r['seconds'].values()) / 60:.0f}" if r["seconds"] else "-"
        diffs = [f"{d['mean']} [{d['ci_low']}, {d['ci_high']}], n {d['n']}, sign p {d['p_sign']}"
                 if (d := r["planted_differences"].get(o)) else "-" for o in ("base", "random")]
        lines.append(
            f"| {r['kind']} | {r['pairs']} ({r['train_pairs']} / {r['eval_pairs']}) | {r['rm_accuracy']} "
            f"[{r['rm_ci'][0]}, {r['rm_ci'][1]}], {r['rm_length_baseline']} | "
            f"{'@champion' if r['promoted'] else 'refused'} | {r['watch_verdict']} (n {r['watch_n']}) | {rate} | "
            f"{diffs[0]} | {diffs[1]} | {minutes} |")
    return "\n".join(lines)


def control(kind: str, root: Path, edits: list[str] = ()) -> dict:
    if kind == "length":
        return length_control(root)
    if kind.startswith("group-"):
        return group_control(kind, root, edits)
    work, env = prepared_copy(kind, root, edits)
    seconds = {"to_promote" if kind == "negative" else "to_evaluate":
               run("dvc repro promote" if kind == "negative" else "dvc repro evaluate", work, env)}
    promote = metrics(work, "promote")  # the decision at the control's own gate
    if kind == "negative":
        merge_params(work, GATE_OFF)
        seconds["grpo_gate_off"] = run("dvc repro train_grpo", work, env)
    seconds = seconds_in_all(work, seconds)
    rm, grpo, evaluate = (metrics(work, n) for n in ("train_rm", "train_grpo", "evaluate"))
    judge = evaluate.get("grpo_minus_base", {}).get("judge_total", {})
    return {"kind": kind, "seconds": {k: round(v) for k, v in seconds.items()},
            **reward_model_row(metrics(work, "pairs"), rm),
            "promoted": promote.get("promoted"), "promote_reason": promote.get("reason"),
            "watch_verdict": grpo.get("watch_verdict"), "watch_n": grpo.get("watch_n"),
            "watch_judge_change": [grpo.get("watch_judge_change"), grpo.get("watch_judge_change_ci_low"),
                                   grpo.get("watch_judge_change_ci_high")],
            "evaluate_judge": [judge.get("diff"), judge.get("ci_low"), judge.get("ci_high"), judge.get("n")],
            "feature_rates": feature_rates(work, QUESTION) if kind == "positive" else None}


def table(results: list[dict]) -> str:
    lines = ["| control | pairs (train / eval) | reward model [95%], length baseline | promotion | "
             "watch (judge change [95%], n) | evaluate GRPO - base, judge [95%], n | feature rate base -> GRPO | minutes |",
             "| --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for r in results:
        w, e, f = r["watch_judge_change"], r["evaluate_judge"], r["feature_rates"] or {}
        lines.append(
            f"| {r['kind']} | {r['pairs']} ({r['train_pairs']} / {r['eval_pairs']}) | {r['rm_accuracy']} "
            f"[{r['rm_ci'][0]}, {r['rm_ci'][1]}], {r['rm_length_baseline']} | "
            f"{'@champion' if r['promoted'] else 'refused'} | {r['watch_verdict']} ({w[0]} [{w[1]}, {w[2]}], "
            f"n {r['watch_n']}) | {e[0]} [{e[1]}, {e[2]}], n {e[3]} | "
            f"{f.get('base', '-')} -> {f.get('grpo', '-')} | {sum(r['seconds'].values()) / 60:.0f} |")
    return "\n".join(lines)


def length_table(result: dict) -> str:
    def cell(d: dict, key: str = "diff") -> str:
        return f"{d.get(key)} [{d.get('ci_low')}, {d.get('ci_high')}]"

    lines = ["| GRPO levers | words | question rate | judge, raw | judge at equal length | `evaluate` says | watch |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in result["levers"].items():
        eq = r["judge_equal_length"]
        lines.append(f"| {name} | {cell(r['words'])} | {cell(r['feature'])} | {cell(r['judge'])}, n {r['judge']['n']} | "
                     f"{cell(eq, 'mean')}{', extrapolated' if eq.get('extrapolated') else ''} | {r['judge_gain_is']} | "
                     f"{r['watch_verdict']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/controls-embedded")
    ap.add_argument("--kinds", default="positive,negative")
    ap.add_argument("--read", metavar="KIND=DIR", action="append", default=[],
                    help="print the table of a stage-2 control repo run elsewhere (CI's), running nothing: "
                         "group-positive=/tmp/pytest-of-root/pytest-N/positive0")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a params.yaml edit over the controls' blocks (not the length control's levers)")
    args = ap.parse_args()
    if args.read:
        print(group_table([group_figures(kind, Path(d), {}) for kind, d in (r.split("=", 1) for r in args.read)]))
        return
    root = Path(args.workdir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    results = [control(kind, root, args.set) for kind in args.kinds.split(",")]
    (root / "controls.json").write_text(json.dumps(results, indent=2) + "\n")
    stage1 = [r for r in results if r["kind"] in ("positive", "negative")]
    if stage1:
        print(table(stage1))
    if stage2 := [r for r in results if r["kind"].startswith("group-")]:
        print(group_table(stage2))
        for r in stage2:
            planted = (f"{r['planted_persona']} (planted) first in {r['planted_first_in_episodes']} of the base "
                       "episodes; " if r["planted_persona"] else "")
            print(f"{r['kind']}: {planted}"
                  f"{r['promote_reason']}; Director reward {r['director_reward'][0]} -> {r['director_reward'][1]}; "
                  f"watch: {r['watch_why']}")
    for r in results:
        if r["kind"] == "length":
            print(f"\nlength control: reward model {r['rm_accuracy']} [{r['rm_ci'][0]}, {r['rm_ci'][1]}] on "
                  f"{r['eval_pairs']} pairs, length baseline {r['rm_length_baseline']}, at equal length "
                  f"{r['rm_equal_length']}, Pearson with words {r['rm_length_pearson']}; {r['promote_reason']}")
            print(length_table(r))


if __name__ == "__main__":
    main()
