"""Who speaks next, measured (the `evaluate_group` stage: mascot/stages/evaluate_group.py). On held-out queries (none of them given episodes),
one conversation per query under each condition:

- trained: the GRPO Director (`models/director`);
- base: the same base model without the adapter;
- random: a random speaking order with a generic directive (the method's ablation);
- round_robin: a fixed order with a generic directive.

The speakers and the judge are the same in every condition, and every condition's conversations roll
forward together (each turn's replies decode in one batch, from one seeded stream); only the Director
differs. Each conversation gets the collective rubric (its block of agent turns), the per-reply persona
rubric averaged over its turns, and the group reward model's score; per-speaker usage is counted. One
MLflow run per condition (comparable in `mlflow ui`), and a DVC metrics file.
"""
from __future__ import annotations

from collections import Counter
from statistics import fmean

from mascot.annotate.controls import first_speaker
from mascot.annotate.director import block_messages
from mascot.annotate.episodes import LLMDirector, Sampling, ScriptedDirector, free_parse_rate
from mascot.annotate.rubric import SCORE_CHOICES
from mascot.config import Params
from mascot.granularity import BLOCK, REPLY
from mascot.io import InputError, columns_of
from mascot.policy.evaluate import load_policy
from mascot.splits import held_out
from mascot.stats import DEFAULT_MIN_N, describe, describe_equal_length, equal_length_difference, mean_with_ci


def turn_units(records: list[dict], queries: dict[str, dict], personas: dict) -> list[dict]:
    """Each agent turn as a stage-1 unit: its persona, the conversation before it, its text."""
    units = []
    for e in records:
        before = list(queries[e["query_id"]]["context"])
        for k, t in enumerate(e["turns"]):
            if t["role"] == "agent":
                units.append(REPLY.unit(f"{e['episode_id']}|t{k}", {"candidate_id": f"{e['episode_id']}|t{k}",
                                                                  "query_id": e["query_id"], "persona": t["speaker"],
                                                                  "episode_id": e["episode_id"]},
                                        personas[t["speaker"]], list(before), t["text"]))
            before.append(block_messages([t])[0])
    return units


# a conversation whose Director failed (a directive that did not parse) counts at the rubric's floor: a Director
# is never scored on its successes only
FAILED_CONVERSATION_SCORE = float(SCORE_CHOICES[0])


def collective_totals(records: list[dict], group_scores: list[dict]) -> dict[str, float]:
    """Per query: the collective total of its conversation, or the floor where the conversation failed. A valid
    conversation the judge could not score is left out (the judge failed, not the Director)."""
    totals = {s["query_id"]: s["total_reward"] for s in group_scores if s["status"] == "scored"}
    return {**totals, **{e["query_id"]: FAILED_CONVERSATION_SCORE for e in records if not e["valid"]}}


def condition_metrics(records: list[dict], group_scores: list[dict], turn_scores: list[dict],
                      rm_scores: dict[str, float], collective=None, persona=None) -> dict:
    def mean(values):
        values = [v for v in values if v is not None]
        return round(fmean(values), 4) if values else None

    collective, persona = collective or BLOCK.rubric(), persona or REPLY.rubric()
    scored = [s for s in group_scores if s["status"] == "scored"]
    turns = [s for s in turn_scores if s["status"] == "scored"]
    agent_by_conversation = [[t for t in e["turns"] if t["role"] == "agent"] for e in records]
    agent = [t for turns in agent_by_conversation for t in turns]
    repeats = [a["speaker"] == b["speaker"] for turns in agent_by_conversation for a, b in zip(turns, turns[1:])]
    with_failures = collective_totals(records, group_scores)
    return {"conversations": len(records), "valid_conversations": sum(e["valid"] for e in records),
            "valid_rate": round(sum(e["valid"] for e in records) / len(records), 4) if records else None,
            "failed_conversations": sum(not e["valid"] for e in records),
            "collective_scored": len(scored),
            # the comparison's figure: every conversation, a failed one at the floor
            "collective_total_with_failures": mean(with_failures.values()),
            **{f"collective_{d}": mean(s["scores"][d] for s in scored) for d in collective.dimensions},
            "collective_total": mean(s["total_reward"] for s in scored),
            "per_reply_scored": len(turns), "per_reply_total": mean(s["total_reward"] for s in turns),
            **{f"per_reply_{d}": mean(s["scores"][d] for s in turns) for d in persona.dimensions},
            "group_rm_score": mean(rm_scores.values()),
            "speaker_usage": dict(Counter(t["speaker"] for t in agent)),
            "distinct_speakers_per_conversation": mean(len({t["speaker"] for t in turns})
                                                       for e, turns in zip(records, agent_by_conversation) if e["valid"]),
            "same_speaker_twice_rate": mean([float(r) for r in repeats]),
            "mean_turn_words": mean(len(t["text"].split()) for t in agent)}


def paired_vs(base: dict[str, float], other: dict[str, float], min_n: int = DEFAULT_MIN_N,
              words: tuple[dict[str, int], dict[str, int]] | None = None, conversation: dict[str, str] | None = None
              ) -> dict:
    """other minus base on the same queries' collective totals: mean, bootstrap 95% interval, n; with `words`
    (each side's block length per query) also `equal_length`, the difference regressed on the block's word
    difference, its interval over conversations (`conversation`: query -> conversation)."""
    common = sorted(set(base) & set(other))
    out = mean_with_ci([other[q] - base[q] for q in common], min_n=min_n)
    if words is not None:
        lengths = [(words[0].get(q, 0), words[1].get(q, 0)) for q in common]
        out["equal_length"] = equal_length_difference(
            [other[q] - base[q] for q in common], [b - a for a, b in lengths],
            [(conversation or {}).get(q, q) for q in common], lengths=lengths, min_n=min_n)
    return out


def block_words(records: list[dict]) -> dict[str, int]:
    """Per query: the words of its conversation's agent turns (the block the collective judge reads)."""
    return {e["query_id"]: sum(len(t["text"].split()) for t in e["turns"] if t["role"] == "agent") for e in records}


def planted_feature(records: list[dict], persona: str) -> dict[str, float]:
    """Per query: 1 where the conversation's first companion turn is `persona`'s (a stage-2 control's planted
    feature: the Director gave it the floor), else 0 (a failed conversation too)."""
    return {e["query_id"]: float(e["valid"] and first_speaker({"block": block_messages(e["turns"])}) == persona)
            for e in records}


def planted_rate(feature: dict[str, float], min_n: int) -> dict:
    """One condition's rate of the planted feature (mean, interval, n; mean None without conversations)."""
    return mean_with_ci(list(feature.values()), null=None, min_n=min_n)


def planted_figures(features: dict[str, dict[str, float]], persona: str, min_n: int,
                    rates: dict[str, dict] | None = None) -> dict:
    """The planted feature's rate per condition (`rates`: those already measured, by planted_rate) and trained minus
    base and minus random, paired by conversation."""
    rates = rates or {}
    out = {"persona": persona, "rate": {c: rates.get(c) or planted_rate(f, min_n) for c, f in features.items()}}
    for other in ("base", "random"):
        if "trained" in features and other in features:
            out[f"trained_minus_{other}"] = paired_vs(features[other], features["trained"], min_n)
    return out


def build_directors(params: Params, personas: dict, director_dir: str) -> dict:
    """Each condition's Director: the trained and the base policy (decoding as train_director trained it),
    or a scripted one (random, round-robin, ...)."""
    from mascot.llm.local_backend import LocalBackend

    p, d, directors = params.evaluate_group, params.train_director, {}
    for condition in p.conditions:
        if condition in ("trained", "base"):
            model, tokenizer = load_policy(d.base_model, director_dir if condition == "trained" else None)
            directors[condition] = LLMDirector(
                LocalBackend.from_model(model, tokenizer, f"{d.base_model}+{condition}", params.llm.speaker.batch_size),
                personas, d.prompt_style, Sampling(p.director_temperature, 1.0, d.max_completion_length, p.seed),
                constrained=p.constrain_directives, prefill=False)  # as train_director trained it
        else:
            directors[condition] = ScriptedDirector(personas, condition, p.seed)
    return directors


def unconstrained_parse_rates(directors: dict, queries: list[dict], samples: int, temperature: float
                              ) -> dict[str, dict]:
    """Each language-model Director's first directive of every conversation, `samples` of them drawn at
    `temperature` without the directive grammar (as GRPO samples it): `free_parse_rate` per condition. A scripted
    Director writes no directive text: it has none."""
    return {condition: free_parse_rate(director, queries, samples, turns=0, temperature=temperature)
            for condition, director in directors.items() if isinstance(director, LLMDirector)}


def trained_minus_base_parse_rate(rates: dict[str, dict], min_n: int = DEFAULT_MIN_N) -> dict | None:
    """What GRPO did to the format it was paid for: trained - base free parse rate, paired by conversation."""
    if not {"trained", "base"} <= set(rates):
        return None
    return paired_vs(rates["base"]["by_query"], rates["trained"]["by_query"], min_n)


def judge_condition(records: list[dict], by_q: dict[str, dict], personas: dict, rubrics: tuple, score, rm_score
                    ) -> tuple[dict, dict[str, float], list[dict]]:
    """One condition's conversations judged: (its figures, each conversation's collective total, its records with
    their collective score and group reward-model score). `score(units, rubric)` is the judge, `rm_score(rows)`
    the group reward model; `rubrics` is (collective, persona)."""
    collective, persona = rubrics
    group_scores = score(BLOCK.judge_units(records, by_q, personas), collective)
    turn_scores = score(turn_units(records, by_q, personas), persona)
    valid = [e for e in records if e["valid"]]
    rm = dict(zip([e["query_id"] for e in valid],
                  rm_score([(None, by_q[e["query_id"]]["context"], block_messages(e["turns"])) for e in valid])
                  if valid else []))
    metrics = condition_metrics(records, group_scores, turn_scores, rm, collective, persona)
    scores_by_id = {s["episode_id"]: s for s in group_scores}
    judged = [{**e, "collective": scores_by_id.get(e["episode_id"]),
               "group_rm_score": rm.get(e["query_id"]) if e["valid"] else None} for e in records]
    return metrics, collective_totals(records, group_scores), judged


def conversations_table(judged: list[dict], by_q: dict[str, dict]) -> dict[str, list]:
    """A condition's conversations as table columns: the query, the user's last message, the turns as
    `speaker: text` lines, whether the Director's directives parsed, the collective total and its dimensions,
    the group reward model's score."""
    rows = []
    for e in judged:
        collective = e.get("collective") or {}
        rows.append({"probe": e["query_id"], "prompt": by_q[e["query_id"]]["context"][-1]["content"],
                     "conversation": "\n".join(f"{t.get('speaker') or t.get('role')}: {t.get('text', '')}"
                                               for t in e.get("turns", [])),
                     "valid": e.get("valid"), "collective_total": collective.get("total_reward"),
                     **{f"collective_{d}": v for d, v in (collective.get("scores") or {}).items()},
                     "group_reward_model": e.get("group_rm_score")})
    return columns_of(rows)


def describe_results(results: dict, conditions: list[str], queries: int, agent_turns: int, min_n: int) -> list[str]:
    """The comparison as a table, then the trained Director against the base one and each condition against the
    random one, each with its interval and at equal block length."""
    lines = [f"evaluate_group: {queries} held-out conversations per condition, {agent_turns} agent turns each; "
             f"a failed conversation counts at the floor ({FAILED_CONVERSATION_SCORE}) in 'all'",
             f"  {'condition':<12} {'n':>3} {'valid':>6} {'free':>6} {'failed':>6} {'all':>7} {'valid only':>10} "
             f"{'per-reply':>9} {'group RM':>8}  speakers"]
    for c in conditions:
        m = results[c]
        free = m.get("directive_parse_rate_unconstrained")
        lines.append(f"  {c:<12} {m['conversations']:>3} {str(m['valid_rate']):>6} {'-' if free is None else free:>6} "
                     f"{m['failed_conversations']:>6} "
                     f"{str(m['collective_total_with_failures']):>7} {str(m['collective_total']):>10} "
                     f"{str(m['per_reply_total']):>9} {str(m['group_rm_score']):>8}  {m['speaker_usage']}")
    lines.append("  (valid: directives that parsed as decoded; free: each first directive sampled without the grammar, "
                 "language-model Directors only)")
    if "trained_minus_base_unconstrained_parse_rate" in results:
        lines.append("  trained - base, parse rate without the grammar, paired by conversation: "
                     f"{describe(results['trained_minus_base_unconstrained_parse_rate'], min_n)}")
    if "planted_feature" in results:
        fig = results["planted_feature"]
        lines.append(f"  the planted feature ({fig['persona']} has the floor first), rate per condition: " + "; ".join(
            f"{c} {describe(r, min_n)}" for c, r in fig["rate"].items()))
        for other in ("base", "random"):
            if f"trained_minus_{other}" in fig:
                lines.append(f"  trained - {other}, planted feature, paired: "
                             f"{describe(fig[f'trained_minus_{other}'], min_n)}")
    paired = [(f"{c} - random", fig) for c, fig in results.get("minus_random_collective_total", {}).items()]
    if "trained_minus_base_collective_total" in results:
        paired.insert(0, ("trained - base", results["trained_minus_base_collective_total"]))
    for label, fig in paired:
        lines.append(f"  {label}, collective total with failures, paired: {describe(fig, min_n)}")
        if "equal_length" in fig:
            lines.append(f"    at equal length (regressed on the block's word difference): "
                         f"{describe_equal_length(fig['equal_length'], min_n)}")
    return lines


def heldout_conversations(queries: list[dict], episodes: list[dict], heldout, max_queries: int | None) -> list[dict]:
    """The held-out queries evaluate_group rolls out: never given episodes, never trained on. An episode on one
    of them means the episodes file is older than the held-out rule."""
    chosen = held_out(queries, heldout, max_queries)
    given = {e["query_id"] for e in episodes} & {q["query_id"] for q in chosen}
    if given:
        raise InputError(f"evaluate_group: held-out queries {sorted(given)} were given episodes: data/group/episodes.jsonl "
                         "is older than the held-out rule; rerun the episodes stage")
    return chosen


