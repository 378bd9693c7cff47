"""The speaker's GRPO (the `train_grpo` stage: mascot/stages/train_grpo.py): a LoRA speaker policy trained with GRPO (mascot/policy/engine.py), rewarded by the
reward model the registry's alias points at (plus a format reward), watched by the judge on held-out probes,
tracked and registered in MLflow."""
from __future__ import annotations

import json

from mascot.annotate.generate import speaker_prompt
from mascot.annotate.rubric import SCORE_CHOICES
from mascot.annotate.score import score_units
from mascot.config import GRPOParams, Params
from mascot.granularity import REPLY, persona_fields
from mascot.io import InputError
from mascot.policy.rewards import LengthCalibration, first_line
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


def speaker_watch(params: Params, p: GRPOParams, queries: dict[str, dict], personas: dict, scorer, judge, style: str):
    """The watch of a speaker policy: held-out queries (the evaluation's rule), each under `probe_personas`
    personas in turn, answered greedily, scored by the reward model, the judge (persona rubric, in prompt format `style`; an
    empty reply at the rubric's floor) and by length and repetition."""
    w, names = p.watch, list(personas)
    probes = [(q, personas[names[(i + j) % len(names)]])
              for i, q in enumerate(held_out(list(queries.values()), params.heldout, w.probe_queries))
              for j in range(min(w.probe_personas, len(names)))]
    prompts = [speaker_prompt(persona, q["context"], p.prompt_style)[0] for q, persona in probes]
    by_id, rubric = {q["query_id"]: q for q, _ in probes}, REPLY.rubric(params)
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
    return LengthCalibration([len(a.split()) for a in answers], scores, c.degree, pay_shorter=c.pay_shorter)


