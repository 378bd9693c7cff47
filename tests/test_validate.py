import copy

import pytest

from mascot.annotate.rubric import PERSONA
from mascot.validate.gate import summary, validate_data
from tests.conftest import handed
from tests.stand_in import server  # noqa: F401  (fixture)


def dataset():
    cands, scores = [], []
    for i, dims in enumerate([4.0, 3.0, 1.0]):
        cid = f"q1|The Anchor|{i}"
        cands.append({"candidate_id": cid, "query_id": "q1", "persona": "The Anchor", "text": f"reply {i}"})
        scores.append({"candidate_id": cid, "query_id": "q1", "persona": "The Anchor", "status": "scored",
                       "scores": {d: dims for d in PERSONA.dimensions}, "total_reward": dims, "unscored_reason": None})
    cands.append({"candidate_id": "q1|The Anchor|3", "query_id": "q1", "persona": "The Anchor", "text": ""})
    scores.append({"candidate_id": "q1|The Anchor|3", "query_id": "q1", "persona": "The Anchor",
                   "status": "unscored", "scores": None, "total_reward": None, "unscored_reason": "empty reply"})

    def pair(c, r):
        return {"pair_id": f"{c}>{r}", "query_id": "q1", "persona": "The Anchor", "split": "train",
                "chosen": [{"role": "assistant", "content": f"reply {c}"}],
                "rejected": [{"role": "assistant", "content": f"reply {r}"}],
                "score_chosen": scores[c]["total_reward"], "score_rejected": scores[r]["total_reward"],
                "margin": scores[c]["total_reward"] - scores[r]["total_reward"],
                "chosen_id": cands[c]["candidate_id"], "rejected_id": cands[r]["candidate_id"]}
    return cands, scores, [pair(0, 1), pair(0, 2), pair(1, 2)]


def failures(results):
    return {(r["table"], r["column"], r["expectation"]): r["unexpected_count"] for r in results if not r["success"]}


def test_gate_passes_clean_data():
    results, quarantine = validate_data(*dataset(), margin=0.5, min_pairs=1)
    assert failures(results) == {}
    assert quarantine == []
    assert summary(results).startswith("all ")


def test_gate_fails_on_a_score_of_six():
    cands, scores, pairs = dataset()
    pairs[0]["score_chosen"] = 6.0
    pairs[0]["margin"] = 6.0 - pairs[0]["score_rejected"]
    results, quarantine = validate_data(cands, scores, pairs, margin=0.5, min_pairs=1)
    assert failures(results) == {("pairs", "score_chosen", "expect_column_values_to_be_between"): 1}
    assert [(q["table"], q["row"]) for q in quarantine] == [("pairs", 0)]
    assert "pairs.score_chosen" in summary(results) and "1 of 3 rows" in summary(results)


def test_gate_fails_on_gap_below_margin():
    cands, scores, pairs = dataset()
    results, quarantine = validate_data(cands, scores, pairs, margin=1.5, min_pairs=1)  # gaps: 1, 3, 2
    assert failures(results) == {("pairs", "gap", "expect_column_values_to_be_between"): 1}
    assert quarantine[0]["record"]["pair_id"] == "0>1"
    assert quarantine[0]["broken"] == ["expect_column_values_to_be_between(gap)"]


def test_gate_catches_broken_scores_and_links():
    cands, scores, pairs = dataset()
    scores[1] = copy.deepcopy(scores[1])
    scores[1]["total_reward"] = 4.5  # not the mean of its dimensions
    pairs[2]["rejected_id"] = "q1|The Anchor|3"  # an unscored candidate
    pairs[1]["split"] = "eval"  # q1 now in both splits
    pairs[0]["rejected"] = pairs[0]["chosen"]
    results, _ = validate_data(cands, scores, pairs, margin=0.5, min_pairs=10)
    got = failures(results)
    assert got[("scores", "total_minus_aggregate", "expect_column_values_to_be_between")] == 1
    assert got[("pairs", "ids_linked", "expect_column_values_to_be_in_set")] == 1
    assert got[("pairs", "splits_of_query", "expect_column_values_to_be_between")] == 3
    assert got[("pairs", "texts_differ", "expect_column_values_to_be_in_set")] == 1
    assert ("pairs", None, "expect_table_row_count_to_be_between") in got


def judge_limits(**kw):
    return {"min_judge_accuracy": 0.6, "max_constant_group_fraction": 0.5, "max_empty_reason_fraction": 0.2, **kw}


def judge(off, off_low, cold, cold_low, n=24):
    """judge_check's figures: point estimates, their intervals' lower bounds (and a symmetric upper), n."""
    return {"ref_gt_off_topic": off, "ref_gt_off_topic_ci_low": off_low, "ref_gt_off_topic_ci_high": round(2 * off - off_low, 4),
            "ref_gt_off_topic_n": n, "ref_gt_cold": cold, "ref_gt_cold_ci_low": cold_low,
            "ref_gt_cold_ci_high": round(2 * cold - cold_low, 4), "ref_gt_cold_n": n}


def test_gate_stops_a_judge_below_the_bar_and_names_the_figure():
    judge_check = judge(0.55, 0.55, 0.9, 0.8)
    results, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, judge_check=judge_check,
                               judge_limits=judge_limits())
    assert failures(results) == {("judge", "ref_gt_off_topic", "expect_column_values_to_be_between"): 1}
    text = summary(results)
    assert "judge quality: ref_gt_off_topic = 0.55" in text and "validate.min_judge_accuracy" in text


def test_gate_stops_a_judge_that_gives_constant_scores():
    cands, scores, pairs = dataset()
    for s in scores:
        if s["status"] == "scored":
            s["total_reward"] = 3.0
            s["scores"] = {d: 3.0 for d in PERSONA.dimensions}
    results, _ = validate_data(cands, scores, [], margin=0.5, min_pairs=0,
                               judge_check=judge(0.9, 0.8, 0.9, 0.8), judge_limits=judge_limits())
    failed = failures(results)
    assert ("judge", "constant_group_fraction", "expect_column_values_to_be_between") in failed
    assert "constant_group_fraction = 1.0" in summary(results)


def test_gate_stops_empty_json_reasons():
    cands, scores, pairs = dataset()
    for s in scores:
        if s["status"] == "scored":
            s["reasons"] = {d: "" for d in PERSONA.dimensions}
    results, _ = validate_data(cands, scores, pairs, margin=0.5, min_pairs=1,
                               judge_check=judge(0.9, 0.8, 0.9, 0.8), judge_limits=judge_limits())
    assert "empty_reason_fraction = 1.0" in summary(results)


def test_a_json_judge_that_answers_1_with_empty_reasons_is_flagged_and_stopped(server, personas, capsys):
    """The defect seen on the real-use path: every candidate got 1 on every dimension with empty reasons
    and was recorded as scored. The scores stay what the judge said; the metrics flag it and the gate stops."""
    import json

    from mascot.annotate.score import score_candidates, score_metrics
    from mascot.config import LLMEndpoint, ScoreParams
    from mascot.llm.openai_backend import OpenAIBackend
    from tests.stand_in import StandIn

    StandIn.json_reply = json.dumps({d: {"reason": "", "score": 1} for d in PERSONA.dimensions})
    ctx = [{"role": "user", "content": "I lost my job."}]
    queries = {f"q{k}": {"query_id": f"q{k}", "context": ctx} for k in range(3)}
    cands = [{"candidate_id": f"q{k}|The Anchor|{i}", "query_id": f"q{k}", "persona": "The Anchor",
              "candidate_index": i, "text": f"reply {i} to {k}"} for k in range(3) for i in range(3)]
    backend = OpenAIBackend(LLMEndpoint(backend="openai", model="m", base_url=server))
    scores = score_candidates(cands, queries, personas, ScoreParams(mode="json", prompt_style="chat"), backend)
    m = score_metrics(scores)
    assert m["constant_group_fraction"] == 1.0 and m["empty_reason_fraction"] == 1.0
    results, _ = validate_data(cands, scores, [], margin=0.5, min_pairs=0,
                               judge_check=judge(0.9, 0.8, 0.9, 0.8), judge_limits=judge_limits())
    text = summary(results)
    with capsys.disabled():
        print("\nGATE on a constant json judge:\n" + text)
    assert "constant_group_fraction = 1.0" in text and "empty_reason_fraction = 1.0" in text


def test_the_judge_bar_is_on_the_interval_not_the_point():
    """Measured on 24 ESConv items the project does not ship: human > off-topic 0.58 [0.38, 0.79], human > cold
    0.50 [0.29, 0.71]. On the point estimate a judge at chance passes a bar of 0.5; on the lower bound it does not."""
    at_chance = judge(0.58, 0.38, 0.50, 0.29)
    point, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, judge_check=at_chance,
                             judge_limits=judge_limits(min_judge_accuracy=0.5), judge_bar_on="point")
    lower, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, judge_check=at_chance,
                             judge_limits=judge_limits(min_judge_accuracy=0.5))
    assert failures(point) == {}
    assert set(failures(lower)) == {("judge", "ref_gt_off_topic", "expect_column_values_to_be_between"),
                                    ("judge", "ref_gt_cold", "expect_column_values_to_be_between")}


@pytest.mark.parametrize("level", ["stop", "warn"])
def test_a_judge_at_chance_stops_or_warns_in_words(repo_root, tmp_path, monkeypatch, capsys, level):
    import json

    import yaml

    from mascot.config import parse_params
    from mascot.io import write_json, write_jsonl
    from mascot.stages import validate as stage

    cands, scores, pairs = dataset()
    monkeypatch.chdir(tmp_path)
    write_jsonl("c.jsonl", cands), write_jsonl("s.jsonl", scores), write_jsonl("p.jsonl", pairs)
    write_json("reports/figures/judge_check.json", judge(0.58, 0.38, 0.50, 0.29))
    write_jsonl("data/queries.jsonl", [{"query_id": f"q{i}", "conversation_id": f"c{i}"} for i in range(12)])
    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["validate"].update(min_judge_accuracy=0.5, judge_gate=level, max_constant_group_fraction=1.0,
                           min_eval_pairs=0)  # the dataset's pairs are all train: the judge is what is tested
    raw["pairs"]["score_margin"] = 0.5
    params = parse_params(raw)
    if level == "stop":
        with pytest.raises(stage.GateFailed):
            stage.main(params, **handed(stage.main, "validate", units_path="c.jsonl", scores_path="s.jsonl",
                                        pairs_path="p.jsonl"))
        assert "judge quality: ref_gt_off_topic = 0.38" in capsys.readouterr().err
        return
    stage.main(params, **handed(stage.main, "validate", units_path="c.jsonl", scores_path="s.jsonl",
                                pairs_path="p.jsonl"))
    out = capsys.readouterr().out
    print(out)
    metrics = json.loads((tmp_path / "reports/figures/validate.json").read_text())
    assert metrics["success"] and metrics["judge_warning"].startswith("the judge cannot be told from chance")
    assert "human reply > off-topic 0.58 [0.38, 0.78] (n 24)" in metrics["judge_warning"]
    assert "validate: WARNING: the judge cannot be told from chance" in out
    from mascot.cli import repeat_judge_warning

    repeat_judge_warning("train_rm")
    assert "train_rm: WARNING: the judge cannot be told from chance" in capsys.readouterr().out


def human(pairs, low, high, base=0.58, controlled=0.33):
    """judge_check's agreement with people (human_pairs and its baselines)."""
    return {"human_pairs": pairs, "human_pairs_ci_low": low, "human_pairs_ci_high": high, "human_pairs_n": 246,
            "human_pairs_conversations": 43, "human_length_baseline": base, "human_pairs_controlled": controlled,
            "human_pairs_controlled_n": 107}


@pytest.mark.parametrize("level", ["stop", "warn"])
def test_a_judge_below_the_human_bar_stops_or_warns_and_says_if_it_beat_length(repo_root, tmp_path, monkeypatch,
                                                                            capsys, level):
    """The figures of issue 27's first measurement: 0.48 [0.40, 0.57] on 246 pairs, longer-wins 0.58. The judge
    passes every synthetic contrast here; only its agreement with people is below the bar."""
    import json

    import yaml

    from mascot.config import parse_params
    from mascot.io import write_json, write_jsonl
    from mascot.stages import validate as stage

    cands, scores, pairs = dataset()
    monkeypatch.chdir(tmp_path)
    write_jsonl("c.jsonl", cands), write_jsonl("s.jsonl", scores), write_jsonl("p.jsonl", pairs)
    write_json("reports/figures/judge_check.json", {**judge(0.9, 0.8, 0.9, 0.8), **human(0.48, 0.40, 0.57)})
    write_jsonl("data/queries.jsonl", [{"query_id": f"q{i}", "conversation_id": f"c{i}"} for i in range(12)])
    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["validate"].update(min_judge_accuracy=0.5, min_human_agreement=0.5, judge_gate=level,
                           max_constant_group_fraction=1.0, min_eval_pairs=0)
    raw["pairs"]["score_margin"] = 0.5
    params = parse_params(raw)
    if level == "stop":
        with pytest.raises(stage.GateFailed):
            stage.main(params, **handed(stage.main, "validate", units_path="c.jsonl", scores_path="s.jsonl",
                                        pairs_path="p.jsonl"))
        err = capsys.readouterr().err
        print(err)
        assert "judge quality: human_pairs = 0.4, below 0.5" in err
        assert "in 0.48 [0.4, 0.57] of 246 pairs from 43 conversations" in err
        assert 'It did not beat "the longer turn wins" (0.58)' in err
        return
    stage.main(params, **handed(stage.main, "validate", units_path="c.jsonl", scores_path="s.jsonl",
                                pairs_path="p.jsonl"))
    warning = json.loads((tmp_path / "reports/figures/validate.json").read_text())["judge_warning"]
    assert warning.startswith("against people the judge scored the higher-rated")
    assert "did not beat" in warning and "(validate.judge_gate: warn)" in warning


def test_a_judge_above_the_human_bar_passes_and_no_bar_means_no_check():
    above = {**judge(0.9, 0.8, 0.9, 0.8), **human(0.7, 0.62, 0.78)}
    results, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, judge_check=above,
                               judge_limits=judge_limits(min_human_agreement=0.55))
    assert failures(results) == {}
    unmeasured, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, judge_check=judge(0.9, 0.8, 0.9, 0.8),
                                  judge_limits=judge_limits(min_human_agreement=0.55))
    assert failures(unmeasured) == {("judge", "human_pairs", "expect_column_values_to_be_between"): 1}
    off, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, judge_check=judge(0.9, 0.8, 0.9, 0.8),
                           judge_limits=judge_limits(min_human_agreement=None))
    assert failures(off) == {}


def test_a_conversation_in_two_splits_breaks_the_gate():
    """Two queries of one conversation, one in train and one in eval: the reward model would be measured on a
    conversation it trained on."""
    cands, scores, pairs = dataset()
    for p in pairs:
        p["conversation_id"] = "esconv-3"
    pairs[2]["query_id"], pairs[2]["split"] = "q2", "eval"  # a sibling query of the same conversation
    results, quarantine = validate_data(cands, scores, pairs, margin=0.5, min_pairs=1)
    assert ("pairs", "splits_of_conversation", "expect_column_values_to_be_between") in failures(results)


@pytest.mark.parametrize("figure, counts, hint", [
    ("eval_pairs", {"heldout_queries": 5}, "raise pairs.eval_fraction"),
    ("heldout_queries", {"heldout_queries": 0}, "raise heldout.fraction"),
])
def test_a_split_too_small_for_later_stages_stops_the_gate_with_what_to_change(figure, counts, hint):
    """No eval pair (promote could never measure the version) or no held-out query (the watch and evaluate have
    nothing to use): the gate stops before training, and says which parameter to change."""
    limits = {"min_train_pairs": 1, "min_eval_pairs": 1 if figure == "eval_pairs" else 0, "min_heldout_queries": 1}
    results, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, split_counts=counts, split_limits=limits)
    assert set(failures(results)) == {("splits", figure, "expect_column_values_to_be_between")}
    text = summary(results)
    assert f"split too small: {figure} = 0.0, below 1" in text and hint in text


def test_the_gate_core_decides_on_data_in_memory_and_warn_lets_the_judge_through():
    """validate's core: loaded records and judge figures in, the decision out (no file read or written)."""
    from mascot.config import load_params
    from mascot.granularity import REPLY
    from mascot.validate.gate import gate

    params = load_params("params.yaml")
    v = params.validate_.model_copy(update={"min_pairs": 1, "min_train_pairs": 1, "min_eval_pairs": 0,
                                            "min_heldout_queries": 0, "min_human_agreement": None,
                                            "judge_gate": "fail"})
    params = params.model_copy(update={"validate_": v, "pairs": params.pairs.model_copy(update={"score_margin": 0.5})})
    counts = {"heldout_queries": 1, "heldout_conversations": 1, "trainable_queries": 1, "trainable_conversations": 1}
    good = judge(0.9, 0.8, 0.9, 0.8)
    *_, warning, ok = gate(params, REPLY, *dataset(), good, counts)
    assert ok and warning is None
    weak = judge(0.55, 0.4, 0.9, 0.8)
    _, _, failed, warning, ok = gate(params, REPLY, *dataset(), weak, counts)
    assert not ok and [r["column"] for r in failed] == ["ref_gt_off_topic"]
    warned = params.model_copy(update={"validate_": v.model_copy(update={"judge_gate": "warn"})})
    _, _, failed, warning, ok = gate(warned, REPLY, *dataset(), weak, counts)
    assert ok and "cannot be told from chance: human reply > off-topic 0.55" in warning


def test_stage_two_has_its_own_split_bars_and_null_takes_stage_ones():
    """Block pairs are far fewer than reply pairs: validate_group may set its own split sizes; where it does
    not, validate's hold, and the failing figure's hint names the block that set the bar."""
    from mascot.config import load_params
    from mascot.granularity import BLOCK, REPLY

    params = load_params("params.yaml")
    shared = params.validate_.model_copy(update={"min_train_pairs": 150, "min_eval_pairs": 20,
                                                 "min_heldout_queries": 40})
    params = params.model_copy(update={"validate_": shared})
    assert BLOCK.split_limits(params) == REPLY.split_limits(params) == {
        "min_train_pairs": 150, "min_eval_pairs": 20, "min_heldout_queries": 40}
    own = params.validate_group.model_copy(update={"min_train_pairs": 20, "min_heldout_queries": 0})
    params = params.model_copy(update={"validate_group": own})
    assert BLOCK.split_limits(params) == {"min_train_pairs": 20, "min_eval_pairs": 20, "min_heldout_queries": 0}
    assert REPLY.split_limits(params)["min_train_pairs"] == 150
    results, _ = validate_data(*dataset(), margin=0.5, min_pairs=1, split_counts={"heldout_queries": 5},
                               split_limits=BLOCK.split_limits(params))  # reply-shaped rows, stage 2's bars
    text = summary(results, BLOCK)
    assert "train_pairs" in text and "bar: validate_group.min_train_pairs" in text and "group_pairs." in text
