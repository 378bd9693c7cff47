"""GRPO on a LoRA Director whose completion is one directive (the `train_director` stage:
mascot/stages/train_director.py).

The reward of a directive is the group reward model the registry's alias points at
(`models:/mascot-group-rm@champion`), on the block that results from rolling the directive forward with the
speakers (`rollout_turns` agent turns); plus a format reward (a parseable directive naming a known agent)
and a diversity term (a penalty for naming the previous turn's speaker again). Weights are parameters.
"""
from __future__ import annotations

import json

from mascot.annotate.director import (DirectiveError, block_messages, directive_text, director_prompt, parse_directive,
                                      roster)
from mascot.annotate.episodes import Branch, LLMDirector, Sampling, roll_forward
from mascot.annotate.rubric import SCORE_CHOICES
from mascot.annotate.score import score_units
from mascot.config import DirectorParams, Params
from mascot.granularity import BLOCK
from mascot.io import InputError
from mascot.pairs import side_words
from mascot.policy.rewards import within_group_length_removed
from mascot.policy.watch.callback import JudgeMemo, Watch
from mascot.policy.watch.kl import answers_and_kl
from mascot.splits import held_out
from mascot.transcript import turn_messages


def director_states(episodes: list[dict], queries: dict[str, dict], personas: dict, params: DirectorParams) -> list[dict]:
    """Where the Director acts in the episodes: each prefix's branch point, and each valid branch after its
    first agent turn (there the previous speaker is known)."""
    rows, seen = [], set()
    for e in episodes:
        if not e["valid"]:
            continue
        context = queries[e["query_id"]]["context"]
        first_agent = next((i for i, t in enumerate(e["turns"]) if t["role"] == "agent"), None)
        states = [[]] if e["prefix_id"] not in seen else []
        seen.add(e["prefix_id"])
        if first_agent is not None and len(e["turns"]) > first_agent + 1:
            # after the first agent turn (and the simulated user's, if any): the next directive's state
            nxt = next((i for i in range(first_agent + 1, len(e["turns"])) if e["turns"][i]["role"] == "agent"), None)
            if nxt is not None:
                states.append(e["turns"][:nxt])
        for turns in states:
            # a chat prompt without the "Agent:" prefill: TRL adds a generation prompt (see director_prompt)
            prompt, _ = director_prompt(personas, context, turns, params.prompt_style, prefill=False)
            previous = next((t["speaker"] for t in reversed(turns) if t["role"] == "agent"), "")
            rows.append({"prompt": prompt, "query_id": e["query_id"], "context": json.dumps(context),
                         "turns": json.dumps(turns), "previous_speaker": previous})
    if not rows:
        raise InputError("train_director: no valid episodes to take Director states from; see reports/figures/episodes.json "
                         "(invalid branches) and the episodes parameters")
    return rows[: params.max_prompts] if params.max_prompts else rows


def _parsed(completion, names: list[str]):
    try:
        return parse_directive(directive_text(completion), names)
    except DirectiveError:
        return None


def unparseable_floor(scorer, episodes: list[dict], queries: dict[str, dict]) -> float:
    """What a directive that does not parse earns from the group reward model: a point below the lowest score it
    gives the episodes' blocks (the blocks it was trained on), one floor for the whole run, so the reward's curve
    compares step with step. (A floor of 0 for a batch with no parseable directive paid it above every block of a
    reward model that scores blocks below 0: the evidence run's reward then fell as the format rose.)"""
    blocks = [(None, queries[e["query_id"]]["context"], block_messages(e["turns"])) for e in episodes if e["valid"]]
    if not blocks:
        raise InputError("train_director: no valid episode to set the floor of an unparseable directive from")
    return round(min(scorer.score(blocks)) - 1.0, 4)


def make_director_rewards(scorer, speaker_backend, personas: dict, params: DirectorParams,
                          rollout_sampling: Sampling, constrain_follow: bool = False, floor: float | None = None) -> list:
    """The Director's three rewards. Completions are plain text (a transcript prompt, continued after its
    "Agent:") or, for a chat prompt, message lists (TRL's conversational format); `directive_format` counts
    which it saw (`completion_kinds`), so the stage can say that a chat Director trained on messages. `floor`:
    the group reward model's pay for a directive that does not parse (`unparseable_floor`)."""
    names = list(personas)
    completion_kinds = {"conversational": 0, "plain": 0}
    length = {"slopes": []}  # each group's slope of reward on block words (kept across a resume: a counter)
    choices = {"steps": []}  # per call (a GRPO step's batch): which agent each directive chose, and its reward

    def group_reward_model(prompts, completions, query_id, context, turns, **_) -> list[float]:
        branches = [Branch(q, i, json.loads(c), json.loads(t)) for i, (q, c, t) in enumerate(zip(query_id, context, turns))]
        # the episodes' Director (the speaker model) writes any directive after the first, as in episodes
        follow = LLMDirector(speaker_backend, personas, "chat", rollout_sampling, constrained=constrain_follow)
        roll_forward(branches, params.rollout_turns, follow, speaker_backend, personas, rollout_sampling,
                     first=[directive_text(c) for c in completions])
        valid = [i for i, b in enumerate(branches) if b.valid]
        scores = dict(zip(valid, scorer.score([(None, branches[i].context, block_messages(branches[i].turns))
                                               for i in valid]))) if valid else {}
        # an unparseable directive has no block to score: at the run's floor, and below the worst parseable
        # directive of the same batch
        low = min([*([] if floor is None else [floor]), *(s - 1.0 for s in scores.values())], default=0.0)
        if valid:  # the reward's slope on the block's words within each prompt's group: measured, and taken off on
            words = [side_words(block_messages(branches[i].turns)) for i in valid]  # train_director.length_calibration
            keyed: dict[str, list[int]] = {}
            for k, i in enumerate(valid):  # one Director state (a prompt's group of directives): query and turns
                keyed.setdefault(f"{query_id[i]}\0{turns[i]}", []).append(k)
            choices["steps"].append(choice_record([_parsed(completions[i], names) for i in valid],
                                                  [scores[i] for i in valid], list(keyed.values())))
            adjusted, slopes = within_group_length_removed([scores[i] for i in valid], words, list(keyed.values()))
            length["slopes"].extend(round(x, 6) for x in slopes)
            if params.length_calibration.enabled:
                scores = dict(zip(valid, adjusted))
        return [scores.get(i, low) for i in range(len(branches))]

    group_reward_model.length = length
    group_reward_model.choices = choices

    def directive_format(prompts, completions, **_) -> list[float]:
        for c in completions:
            completion_kinds["conversational" if isinstance(c, list) else "plain"] += 1
        return [float(_parsed(c, names) is not None) for c in completions]

    directive_format.completion_kinds = completion_kinds

    def speaker_diversity(prompts, completions, previous_speaker, **_) -> list[float]:
        out = []
        for c, prev in zip(completions, previous_speaker):
            d = _parsed(c, names)
            out.append(-1.0 if d is not None and prev and d.agent == prev else 0.0)
        return out

    return [group_reward_model, directive_format, speaker_diversity]


def choice_record(directives: list, scores: list[float], groups: list[list[int]]) -> dict:
    """One GRPO step's choices: how many directives named each agent, the group reward model's score centred in its
    prompt's group (the part of GRPO's advantage the reward model gives) averaged per agent, and the score's mean
    spread within groups (a group whose directives all score alike teaches nothing)."""
    import numpy as np

    centred, spreads = [0.0] * len(scores), []
    for idx in groups:
        values = np.asarray([scores[k] for k in idx], dtype=float)
        spreads.append(float(values.std()))
        for k, v in zip(idx, values - values.mean()):
            centred[k] = float(v)
    by_agent: dict[str, list[float]] = {}
    for d, c in zip(directives, centred):
        by_agent.setdefault(d.agent if d is not None else "(unparsed)", []).append(c)
    return {"chosen": {a: len(v) for a, v in by_agent.items()},
            "advantage": {a: round(sum(v) / len(v), 4) for a, v in by_agent.items()},
            "reward_spread_within_groups": round(sum(spreads) / len(spreads), 4) if spreads else None}


def length_figures(slopes: list[float], enabled: bool) -> dict:
    """What the group reward model paid a block word inside a prompt's group of directives: over all groups, and the
    first and last quarter of them (a slope that grows is a Director moving where length pays), and whether the
    lever took it off."""
    q = max(1, len(slopes) // 4)
    mean = (lambda xs: round(sum(xs) / len(xs), 6) if xs else None)
    return {"length_within_group_groups": len(slopes), "length_within_group_slope_per_word": mean(slopes),
            "length_within_group_slope_first_quarter": mean(slopes[:q]),
            "length_within_group_slope_last_quarter": mean(slopes[-q:]), "length_within_group_removed": enabled}


def director_watch(params: Params, p: DirectorParams, queries: dict[str, dict], personas: dict, scorer, speaker, judge,
                   rollout: Sampling, style: str):
    """The watch of a Director: held-out queries (the evaluation's rule) at their branch point; the policy's
    greedy directive is rolled forward `rollout_turns` turns by the speakers (as in training), and the block is
    scored by the group reward model and by the judge on the collective rubric, in prompt format `style` (a directive that does not parse
    leaves no block: the judge's floor, and no reward-model score)."""
    w = p.watch
    probes = held_out(list(queries.values()), params.heldout, w.probe_queries)
    prompts = [director_prompt(personas, q["context"], [], p.prompt_style, prefill=False)[0] for q in probes]
    team, rubric = roster(personas), BLOCK.rubric(params)
    judged = JudgeMemo(lambda units: score_units(units, rubric, params.score, judge, prompt_style=style),
                       float(SCORE_CHOICES[0]))

    def answer(model, tokenizer):
        raw, kl = answers_and_kl(model, tokenizer, prompts, w.max_tokens or p.max_completion_length, w.temperature,
                                 kl_dtype=w.kl_dtype)
        # a transcript prompt ends in "Agent:" (the completion continues it); a chat one has no prefill
        directives = [directive_text(r, prefilled=not isinstance(prompt, list)) for r, prompt in zip(raw, prompts)]
        branches = [Branch(q["query_id"], 0, q["context"]) for q in probes]
        follow = LLMDirector(speaker, personas, "chat", rollout, constrained=params.episodes.constrain_directives)
        roll_forward(branches, p.rollout_turns, follow, speaker, personas, rollout, first=directives)
        valid = [i for i, b in enumerate(branches) if b.valid]
        rm_valid = dict(zip(valid, scorer.score([(None, branches[i].context, block_messages(branches[i].turns))
                                                 for i in valid]))) if valid else {}
        units = [BLOCK.unit(f"{b.query_id}|watch", {"episode_id": f"{b.query_id}|watch", "query_id": b.query_id,
                                                     "prefix_id": b.query_id, "branch": 0},
                            team, b.context, turn_messages(b.turns), None if b.valid else "empty block") for b in branches]
        # length is the block's words, what the judge reads (a directive's own words are not): the watch's
        # equal-length figure is then evaluate_group's
        words = [sum(len(t["text"].split()) for t in b.turns if t["role"] == "agent") for b in branches]
        return (directives, [rm_valid.get(i) for i in range(len(branches))], judged(units),
                {**kl, "judge_dimensions": judged.dimensions(units), "length": words})
    described = [{"probe": q["query_id"], "persona": None, "prompt": q["context"][-1]["content"]} for q in probes]
    return Watch(answer, w.every_steps, w.judge_margin, w.stop_when_over_optimising, w.patience, params.stats.min_n,
                 probes=described, max_kl=w.max_kl)


