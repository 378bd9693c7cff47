"""The promotion gate's rules: measure a reward model on eval pairs, and the bars it must pass (the `promote`
stages and `mascot promote`: mascot/stages/promote.py).
"""
from __future__ import annotations

from mascot.io import InputError
from mascot.reward.evaluation import describe_human, pair_metrics
from mascot.reward.scorer import RewardScorer
from mascot.stats import DEFAULT_MIN_N

ROUNDTRIP_TOLERANCE = 1e-4


def score_pairs(scorer: RewardScorer, pairs: list[dict], personas: dict) -> tuple[list[float], list[float]]:
    """The scores of each pair's chosen and rejected side."""
    sides = [scorer.granularity.pair_sides(p, personas) for p in pairs]
    return (scorer.score([(persona, ctx, chosen) for persona, ctx, chosen, _ in sides]),
            scorer.score([(persona, ctx, rejected) for persona, ctx, _, rejected in sides]))


def measure(scorer: RewardScorer, pairs: list[dict], personas: dict, min_n: int = DEFAULT_MIN_N) -> dict:
    return pair_metrics(pairs, *score_pairs(scorer, pairs, personas), min_n)


def human_gate(promoted: bool, reason: str, human: dict, bar: float | None, bar_on: str,
               min_n: int = DEFAULT_MIN_N) -> tuple[bool, str]:
    """The reward model's agreement with people (untrained human pairs, `human_set_metrics`) added to the
    decision: always in the reason; with a bar (promote.min_human_agreement), required at `bar_on`."""
    if not human.get("human_pairs_n"):
        if bar is None:
            return promoted, reason
        return False, (f"no untrained human pairs (no human set, or none of its rated conversations is held out or in "
                       f"the eval split), so "
                       f"promote.min_human_agreement {bar} cannot be met (the eval pairs: {reason})")
    words = describe_human(human, min_n=min_n)
    if bar is None or not promoted:
        return promoted, f"{reason}; {words}"
    figure = human.get("human_pairs_ci_low") if bar_on == "lower_bound" else human.get("human_pairs")
    if figure is None or figure < bar:
        where = "lower bound" if bar_on == "lower_bound" else "point estimate"
        return False, (f"{words}: its {where} {figure} is below promote.min_human_agreement {bar} (the eval pairs "
                       f"passed: {reason})")
    return True, f"{reason}; {words} >= promote.min_human_agreement {bar}"


def chance_gate(promoted: bool, reason: str, new: dict, max_null_p: float | None) -> tuple[bool, str]:
    """With a bar (promote.max_null_p): the eval accuracy must be out of reach of a scorer that learned nothing
    on these very pairs (`accuracy_null_p`, mascot/reward/evaluation.py), which an interval over conversations
    does not fully say when a pair set's pairs share replies."""
    null_p = new.get("accuracy_null_p")
    if max_null_p is None or not promoted:
        return promoted, reason
    if null_p is None or null_p > max_null_p:
        return False, (f"a scorer that learned nothing reaches this eval accuracy on the same pairs with p {null_p} > "
                       f"promote.max_null_p {max_null_p} (the rest passed: {reason})")
    return True, f"{reason}; chance p {null_p} <= promote.max_null_p {max_null_p}"


FROM_EXPERIMENT_ENV = "MASCOT_PROMOTE_FROM_EXPERIMENT"


def parse_model_uri(uri: str) -> tuple[str, str]:
    """(registered model name, "@alias" or version) of `models:/NAME@ALIAS` or `models:/NAME/VERSION`: the name
    comes from the URI, never from params (the group reward model is probed as `models:/mascot-group-rm@...`)."""
    rest = uri.removeprefix("models:/")
    if rest == uri or not rest:
        raise InputError(f"--uri {uri!r}: expected models:/NAME@ALIAS or models:/NAME/VERSION")
    if "@" in rest:
        name, alias = rest.split("@", 1)
        return name, "@" + alias
    name, _, version = rest.rpartition("/")
    if not name or not version:
        raise InputError(f"--uri {uri!r}: expected models:/NAME@ALIAS or models:/NAME/VERSION")
    return name, version


