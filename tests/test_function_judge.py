"""The programmatic judge (score.scorer: {kind: function}): scores, mixing with the LLM judge, errors."""
import pytest

from mascot.annotate.controls import feature_rate, planted_feature, seeded_noise
from mascot.annotate.function_judge import FunctionJudge, JudgeFunctionError, load_function, make_judge
from mascot.annotate.rubric import load_rubric
from mascot.annotate.score import score_units
from mascot.config import ConfigError, ScoreParams, parse_params
from mascot.granularity import BLOCK, REPLY

RUBRIC = load_rubric("data/rubrics/persona.yaml")


def _judge(target: str, dims=None, llm=None, **kwargs) -> FunctionJudge:
    return FunctionJudge(target, load_function(target), dims, kwargs, llm)


def _units(personas, texts):
    persona = personas["The Anchor"]
    context = [{"role": "user", "content": "I failed my exam."}]
    return [REPLY.unit(f"c{i}", {"candidate_id": f"c{i}", "query_id": "q", "persona": persona.name}, persona, context, t)
            for i, t in enumerate(texts)]


def test_a_function_judge_scores_every_dimension_and_skips_empty_replies(personas):
    judge = _judge("mascot.annotate.controls:planted_feature", pattern=r"\?")
    records = score_units(_units(personas, ["How did it go?", "That is hard.", "  "]), RUBRIC, ScoreParams(), judge)
    assert [r["total_reward"] for r in records] == [5.0, 1.0, None]
    assert records[0]["judge_mode"] == "function" and records[2]["unscored_reason"] == "empty reply"
    assert set(records[0]["scores"]) == set(RUBRIC.dimensions)


def test_a_function_judge_mixes_with_the_llm_judge_on_the_dimensions_it_owns(personas, tiny_backend):
    judge = _judge("mascot.annotate.controls:planted_feature", ("social_contribution",), tiny_backend, pattern=r"\?")
    params = ScoreParams(min_choice_mass=0.0)
    [asks, states] = score_units(_units(personas, ["How did it go?", "That is hard."]), RUBRIC, params, judge)
    assert asks["judge_mode"] == "expected+function" and asks["function_dimensions"] == ["social_contribution"]
    assert asks["scores"]["social_contribution"] == 5.0 and states["scores"]["social_contribution"] == 1.0
    for record in (asks, states):  # the LLM's own scores on the other dimensions, and its whole record kept
        assert all(record["scores"][d] == record["llm_scores"][d] for d in RUBRIC.dimensions if d != "social_contribution")
        assert record["total_reward"] == pytest.approx(RUBRIC.total(record["scores"]), abs=1e-4)


def test_seeded_noise_is_a_function_of_the_text_and_seed_only():
    subject = {"text": "same words"}
    a, b = seeded_noise(subject, RUBRIC, seed=1), seeded_noise(dict(subject), RUBRIC, seed=1)
    assert a == b and a != seeded_noise(subject, RUBRIC, seed=2)
    assert all(1 <= v <= 5 for v in a.values()) and len(set(a.values())) > 1


def test_block_units_give_the_function_the_rendered_block():
    turns = [{"role": "assistant", "name": "The Anchor", "content": "I hear you. 3 things help."}]
    unit = BLOCK.unit("e1", {"episode_id": "e1"}, "The Anchor (listener)", [{"role": "user", "content": "hi"}], turns)
    assert unit["subject"]["granularity"] == "block" and "3 things" in unit["subject"]["text"]
    assert planted_feature(unit["subject"], RUBRIC, pattern="[0-9]")["perceived_empathy"] == 5.0
    assert feature_rate(["a1", "b", "c", "d2"], "[0-9]") == 0.5


def _bad_range(subject, rubric):
    return {d: 6 for d in rubric.dimensions}


def _missing(subject, rubric):
    return {"perceived_empathy": 3}


def test_bad_functions_and_bad_config_say_what_is_wrong(personas):
    units = _units(personas, ["hello"])
    with pytest.raises(JudgeFunctionError, match=r"c0: persona_consistency = 6 is not a number in \[1, 5\]"):
        score_units(units, RUBRIC, ScoreParams(), _judge("tests.test_function_judge:_bad_range"))
    with pytest.raises(JudgeFunctionError, match=r"no score for \['persona_consistency'"):
        score_units(units, RUBRIC, ScoreParams(), _judge("tests.test_function_judge:_missing"))
    with pytest.raises(JudgeFunctionError, match="cannot import module 'no_such_module'"):
        load_function("no_such_module:f")
    with pytest.raises(JudgeFunctionError, match="has no function 'nope'"):
        load_function("mascot.annotate.controls:nope")
    with pytest.raises(JudgeFunctionError, match="not dimensions of the rubric"):
        score_units(units, RUBRIC, ScoreParams(), _judge("mascot.annotate.controls:seeded_noise", ("kindness",)))
    with pytest.raises(ConfigError, match="score.scorer"):
        parse_params({"score": {"scorer": {"kind": "function"}}}, "params.yaml")


def test_make_judge_builds_no_llm_for_a_function_that_owns_every_dimension():
    import yaml

    raw = yaml.safe_load(open("params.yaml"))
    raw["score"]["scorer"] = {"kind": "function", "target": "mascot.annotate.controls:seeded_noise", "kwargs": {"seed": 3}}
    raw["llm"]["judge"]["model"] = "/nonexistent"  # never loaded: the function owns every dimension
    judge = make_judge(parse_params(raw, "params.yaml"))
    assert isinstance(judge, FunctionJudge) and judge.llm is None and judge.kwargs == {"seed": 3}
    assert judge.identity["source_sha256"] != "unknown"


def test_a_block_judge_of_its_own_leaves_the_reply_judge_as_it_was():
    """score_group.scorer judges blocks only: a stage-2 control plants its preference there while stage 1's judge
    (and every stage-1 output DVC cached) stays as it was."""
    import yaml

    from mascot.annotate.controls import planted_persona
    from mascot.annotate.function_judge import scorer_for

    raw = yaml.safe_load(open("params.yaml"))
    raw["score"]["scorer"] = {"kind": "function", "target": "mascot.annotate.controls:seeded_noise"}
    raw["score_group"]["scorer"] = {"kind": "function", "target": "mascot.annotate.controls:planted_speaker",
                                    "kwargs": {"persona": "The Beacon"}}
    params = parse_params(raw, "params.yaml")
    assert scorer_for(params, REPLY.score_block).target.endswith(":seeded_noise")
    assert scorer_for(params, BLOCK.score_block).target.endswith(":planted_speaker")
    assert make_judge(params, BLOCK.score_block).key == "score_group.scorer"
    assert planted_persona(scorer_for(params, BLOCK.score_block)) == "The Beacon"
    assert planted_persona(params.score.scorer) is None
    raw["score_group"]["scorer"] = None  # null: blocks take score.scorer
    assert scorer_for(parse_params(raw, "params.yaml"), BLOCK.score_block).target.endswith(":seeded_noise")
    raw["score_group"]["scorer"] = {"kind": "function", "target": "mascot.annotate.controls:no_such_function"}
    with pytest.raises(JudgeFunctionError, match="score_group.scorer.target"):
        make_judge(parse_params(raw, "params.yaml"), BLOCK.score_block)


def test_the_planted_speaker_pays_the_block_given_to_its_persona_first():
    from mascot.annotate.controls import planted_speaker
    from mascot.annotate.rubric import COLLECTIVE

    def block(*names):
        return {"granularity": "block", "text": "", "block": [
            {"role": "user", "content": "hi"}, *({"role": "assistant", "name": n, "content": "x"} for n in names)]}

    assert set(planted_speaker(block("The Beacon", "The Anchor"), COLLECTIVE, "The Beacon").values()) == {5.0}
    assert set(planted_speaker(block("The Anchor", "The Beacon"), COLLECTIVE, "The Beacon").values()) == {1.0}
    assert set(planted_speaker(block(), COLLECTIVE, "The Beacon").values()) == {1.0}
    reply = {"granularity": "reply", "text": "x", "persona": "The Beacon"}
    assert set(planted_speaker(reply, COLLECTIVE, "The Beacon").values()) == {5.0}
