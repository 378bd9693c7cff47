"""The `train_grpo` stage: a LoRA speaker policy trained with GRPO (mascot/policy/engine.py), rewarded by the
reward model the registry's alias points at (plus a format reward), watched by the judge on held-out probes,
tracked and registered in MLflow."""
from __future__ import annotations

import json
import os
from pathlib import Path

from mascot import registry
from mascot.annotate.function_judge import make_judge
from mascot.annotate.generate import speaker_prompt
from mascot.annotate.rubric import SCORE_CHOICES
from mascot.annotate.score import resolve_prompt_style, score_units
from mascot.config import GRPOParams
from mascot.data.personas import load_personas
from mascot.granularity import REPLY, persona_fields
from mascot.io import InputError, load_jsonl
from mascot.launch import is_main_process
from mascot.policy.engine import PolicyStage, champion_scorer, run_policy_stage
from mascot.policy.rewards import (LengthCalibrated, LengthCalibration, WithinGroupLength, first_line,
                                   make_format_reward, make_reward_model_reward, stop_token_ids)
from mascot.policy.watch.callback import JudgeMemo, Watch
from mascot.policy.watch.kl import answers_and_kl, greedy_answers
from mascot.precision import load_causal_lm
from mascot.splits import held_out


def grpo_prompts(queries: list[dict], pairs: list[dict], personas: dict, params: GRPOParams) -> list[dict]:
    """Eval-split queries of the pairs, each with the persona it was paired under."""
    seen, rows = set(), []
    for p in pairs:
        key = (p["query_id"], p["persona"])
        if p["split"] != "eval" or key in seen:
            continue
        seen.add(key)
        q = queries[p["query_id"]]
        prompt, _ = speaker_prompt(personas[p["persona"]], q["context"], params.prompt_style)
        rows.append({"prompt": prompt, "persona": p["persona"], "query_id": p["query_id"],
                     "context": json.dumps(q["context"])})
    if not rows:
        raise InputError("train_grpo: no eval-split pairs to take prompts from; lower pairs.score_margin or add data")
    return rows[: params.max_prompts] if params.max_prompts else rows


def speaker_watch(params, p: GRPOParams, queries: dict[str, dict], personas: dict, scorer, judge):
    """The watch of a speaker policy: held-out queries (the evaluation's rule), each under `probe_personas`
    personas in turn, answered greedily, scored by the reward model, the judge (persona rubric; an empty reply
    at the rubric's floor) and by length and repetition."""
    w, names = p.watch, list(personas)
    probes = [(q, personas[names[(i + j) % len(names)]])
              for i, q in enumerate(held_out(list(queries.values()), params.heldout, w.probe_queries))
              for j in range(min(w.probe_personas, len(names)))]
    prompts = [speaker_prompt(persona, q["context"], p.prompt_style)[0] for q, persona in probes]
    style, by_id, rubric = resolve_prompt_style(params.score), {q["query_id"]: q for q, _ in probes}, REPLY.rubric(params)
    judged = JudgeMemo(lambda units: score_units(units, rubric, params.score, judge, prompt_style=style),
                       float(SCORE_CHOICES[0]))

    def answer(model, tokenizer):
        raw, kl = answers_and_kl(model, tokenizer, prompts, w.max_tokens or p.max_completion_length, w.temperature,
                                 kl_dtype=w.kl_dtype)
        # what the reward functions read: a chat reply whole, a transcript reply's first line
        answers = [r.strip() if isinstance(prompt, list) else first_line(r) for r, prompt in zip(raw, prompts)]
        rm = scorer.score([(persona_fields(persona), q["context"], a) for (q, persona), a in zip(probes, answers)])
        cands = [{"candidate_id": f"{q['query_id']}|{persona.name}|watch", "query_id": q["query_id"],
                  "persona": persona.name, "text": a} for (q, persona), a in zip(probes, answers)]
        units = REPLY.judge_units(cands, by_id, personas)
        return answers, rm, judged(units), {**kl, "judge_dimensions": judged.dimensions(units)}
    described = [{"probe": q["query_id"], "persona": persona.name, "prompt": q["context"][-1]["content"]}
                 for q, persona in probes]
    return Watch(answer, w.every_steps, w.judge_margin, w.stop_when_over_optimising, w.patience, params.stats.min_n,
                 probes=described, max_kl=w.max_kl)


def base_policy_calibration(p: GRPOParams, rows: list[dict], scorer, personas: dict) -> LengthCalibration:
    """The length calibration's fit: the base policy (no adapter) samples `length_calibration.samples` answers to
    the training prompts in turn, at GRPO's temperature and completion length, and the reward model scores them."""
    from transformers import AutoTokenizer

    c = p.length_calibration
    picked = [rows[k % len(rows)] for k in range(c.samples)]
    model, tokenizer = load_causal_lm(p.base_model), AutoTokenizer.from_pretrained(p.base_model)
    raw = greedy_answers(model, tokenizer, [r["prompt"] for r in picked], p.max_completion_length, p.temperature)
    del model
    # what the reward function reads: a chat reply whole, a transcript reply's first line
    answers = [a.strip() if isinstance(r["prompt"], list) else first_line(a) for a, r in zip(raw, picked)]
    scores = scorer.score([(persona_fields(personas[r["persona"]]), json.loads(r["context"]), a)
                           for r, a in zip(picked, answers)])
    return LengthCalibration([len(a.split()) for a in answers], scores, c.degree)


def main(params, queries_path: str = "data/queries.jsonl", pairs_path: str = "data/pairs.jsonl",
         out_dir: str = "models/policy", metrics_path: str = "reports/figures/train_grpo.json",
         plots_path: str = "plots/train_grpo/rewards.csv", watch_plot: str = "plots/train_grpo/watch.csv") -> None:
    p: GRPOParams = params.grpo
    os.environ.setdefault("HF_MLFLOW_LOG_ARTIFACTS", "0")
    registry.setup_tracking(params)
    rm_name = params.train_rm.registered_model
    _, rm_alias = registry.check_recorded_champion(rm_name, p.reward_alias, "reports/figures/promote.json", "train_grpo",
                                                   "promote")
    rm_version, rm_uri, scorer = champion_scorer(rm_name, rm_alias, "train_grpo", "promote")
    personas = load_personas(params.prepare.personas_file)
    queries = {q["query_id"]: q for q in load_jsonl(queries_path)}
    rows = grpo_prompts(queries, load_jsonl(pairs_path), personas, p)
    tags = {**registry.git_state(), "reward_model": rm_name, "reward_model_version": rm_version,
            "reward_model_alias": rm_alias, "reward_model_uri": rm_uri,
            "personas": ",".join(sorted({r["persona"] for r in rows})), "base_model": p.base_model,
            "rubric_aggregate": REPLY.rubric(params).aggregation,
            **registry.base_model_tags(p.base_model)}
    series = {plots_path: ["step", "reward", "rewards/reward_model/mean", "rewards/format_reward/mean", "reward_std",
                           "frac_reward_zero_std", "completions/clipped_ratio"],
              str(Path(plots_path).with_name("completion_length.csv")): ["step", "completions/mean_length"]}
    reward_model = make_reward_model_reward(scorer, personas)
    calibrated = None  # a lever against length: its figures() go to the stage's metrics after training
    if p.length_calibration.enabled and p.length_calibration.method == "within_group":
        reward_model = calibrated = WithinGroupLength(reward_model)
        print("train_grpo: length calibration within each prompt's group: GRPO is paid the reward model's score "
              "less the group's own slope on words")
    elif p.length_calibration.enabled:
        calibration = base_policy_calibration(p, rows, scorer, personas)
        reward_model = calibrated = LengthCalibrated(reward_model, calibration)
        fitted = calibration.figures()
        tags.update({k: str(v) for k, v in fitted.items()})
        print(f"train_grpo: length calibration on {calibration.n} base-policy answers "
              f"({calibration.low:g}-{calibration.high:g} words): the reward model paid "
              f"{fitted['length_calibration_slope_per_word']:+.4g} a word (R^2 {calibration.r2:.3f}, one-sided "
              f"p {calibration.trend_p:.3g}); " + ("GRPO is paid the score less that fit" if calibration.active else
                                                   "no rise with words to take off: GRPO is paid the score as it is"))
    judge = None
    if p.watch.enabled and is_main_process():
        judge = make_judge(params)
    try:
        watch = speaker_watch(params, p, queries, personas, scorer, judge) if judge is not None else None
        stage = PolicyStage(
            "grpo", p, params.mlflow.policy_experiment, "LoRA speaker policy trained with GRPO",
            [reward_model, make_format_reward(stop_token_ids(p.base_model))],
            [p.reward_weight, p.format_weight], tags, out_dir, metrics_path, series, watch=watch,
            watch_plot=watch_plot, inputs=[(pairs_path, "train")],
            extra_metrics=(lambda history: calibrated.figures()) if calibrated is not None else None)
        metrics, version = run_policy_stage(params, stage, rows)
    finally:
        if judge is not None:
            judge.close()
    if version is None:  # a DDP rank other than the main one
        return
    if watch is not None:
        print(f"train_grpo: watch verdict {metrics['watch_verdict']}: {metrics['watch_why']}")
    print(f"train_grpo: {metrics['steps']} steps, reward {metrics['reward_first_step']} -> "
          f"{metrics['reward_last_step']}, reward model {rm_name} v{rm_version} ({rm_uri}); "
          f"registered {version.name} v{version.version}")
