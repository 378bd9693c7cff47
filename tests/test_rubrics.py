"""Rubrics are data (data/rubrics/*.yaml), and a granularity owns its behaviour: a third rubric needs no code,
and no stage module branches on which granularity it runs."""
import re
from pathlib import Path

import pytest
import yaml

from mascot.annotate.rubric import COLLECTIVE, PERSONA, RubricError, load_rubric
from mascot.llm.backend import ChoiceDistribution

ROOT = Path(__file__).resolve().parents[1]

THIRD = {
    "name": "brevity", "unit": "reply",
    "intro": "You are a strict judge of how briefly and clearly a companion replies. Rate the reply on two dimensions, "
             "each an integer from 1 to 5:",
    "dimensions": {"concision": "the reply says what it means in few words",
                   "clarity": "a reader understands the reply at once"},
    "strictness": "Be strict. 3 is the default; 4 and 5 are rare.",
    "anchors": [{"item": "Persona: The Anchor.\nConversation:\nPerson: hi\nReply: Hello! How are you today, my friend, "
                         "on this fine and lovely day that we share?\n",
                 "scores": {"concision": 1, "clarity": 3}}],
}


def test_the_shipped_rubrics_load_from_their_files():
    assert list(PERSONA.dimensions) == ["persona_consistency", "perceived_empathy", "emotional_expressiveness",
                                        "relevance_coherence", "social_contribution"]
    assert len(COLLECTIVE.dimensions) == 4 and COLLECTIVE.unit == "block" and len(COLLECTIVE.anchors) == 2
    assert PERSONA.header.startswith("You are a strict judge") and "- perceived_empathy: " in PERSONA.header


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(dimension={}), ["dimension", "unknown key"]),
    (lambda r: r["anchors"][0]["scores"].pop("clarity"), ["anchors.0.scores", "missing ['clarity']"]),
    (lambda r: r["anchors"][0]["scores"].update(clarity=7), ["anchors.0.scores.clarity", "less than or equal to 5"]),
    (lambda r: r["dimensions"].update({"Bad Name": "x"}), ["dimensions", "Bad Name"]),
    (lambda r: r.pop("strictness"), ["strictness", "Field required"]),
])
def test_a_bad_rubric_file_names_the_file_and_the_key(tmp_path, edit, words):
    path, error = refused(tmp_path, edit)
    assert str(path) in error and all(w in error for w in words), error


def refused(tmp_path, edit) -> tuple:
    """The shipped-shape rubric THIRD, edited, written and loaded: (its path, the error it was refused with)."""
    raw = yaml.safe_load(yaml.safe_dump(THIRD))
    edit(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RubricError) as err:
        load_rubric(path)
    return path, str(err.value)


class DigitJudge:
    """A stand-in judge for our own scoring logic: the digit it favours falls with the reply's length."""
    model_name = "digit-judge"
    identity = {"backend": "fake", "model": "digit-judge"}

    def choice_distribution(self, prompts, choices):
        out = []
        for p in prompts:
            reply = p.split("Reply: ")[-1].split("\n")[0]
            best = max(1, 5 - len(reply.split()) // 4)
            out.append(ChoiceDistribution({c: (0.8 if int(c) == best else 0.05) for c in choices}, 0.9))
        return out


def test_a_third_rubric_runs_score_pairs_and_gate_without_code(tmp_path, personas, capsys):
    from mascot.annotate.score import score_candidates, score_metrics
    from mascot.config import PairsParams, ScoreParams
    from mascot.granularity import REPLY
    from mascot.pairs import build_pairs
    from mascot.validate.gate import summary, validate_data

    path = tmp_path / "brevity.yaml"
    path.write_text(yaml.safe_dump(THIRD))
    rubric = load_rubric(path)
    name = next(iter(personas))
    queries = {f"q{i}": {"query_id": f"q{i}", "context": [{"role": "user", "content": f"I had a rough day {i}."}]}
               for i in range(4)}
    texts = ["I hear you.", "That sounds like a long and heavy day, and it makes sense to feel worn out.",
             "Rest now; tell me more tomorrow if you want, I am here and I will listen to all of it, every part."]
    candidates = [{"candidate_id": f"q{i}|{name}|{k}", "query_id": f"q{i}", "persona": name, "candidate_index": k,
                   "text": t} for i in range(4) for k, t in enumerate(texts)]
    params = ScoreParams(rubric=str(path), mode="expected", few_shot=True)
    scores = score_candidates(candidates, queries, personas, params, DigitJudge())
    assert all(set(s["scores"]) == {"concision", "clarity"} for s in scores)
    pairs = build_pairs(candidates, scores, queries, personas, PairsParams(score_margin=0.5, eval_fraction=0.5))
    assert pairs and all(p["chosen"][0]["content"] == texts[0] or p["rejected"][0]["content"] == texts[2]
                         for p in pairs)
    judge_check = {"ref_gt_off_topic": 0.9, "ref_gt_off_topic_ci_low": 0.8, "ref_gt_cold": 0.9,
                   "ref_gt_cold_ci_low": 0.8}
    results, quarantine = validate_data(candidates, scores, pairs, 0.5, 1, judge_check=judge_check, rubric=rubric,
                                        judge_limits={"min_judge_accuracy": 0.5, "max_constant_group_fraction": 0.5,
                                                      "max_empty_reason_fraction": 0.2}, granularity=REPLY)
    print(f"\nrubric {rubric.name} ({', '.join(rubric.dimensions)}) from {path.name}: {len(scores)} scored, "
          f"{len(pairs)} pairs; gate: {summary(results)}; score metrics: "
          f"{ {k: v for k, v in score_metrics(scores, rubric).items() if k.startswith('mean_')} }")
    assert all(r["success"] for r in results) and not quarantine
    # the gate checks this rubric's dimensions, not stage 1's: a missing one is caught
    broken = [dict(s, scores={"concision": s["scores"]["concision"]}) for s in scores]
    results, _ = validate_data(candidates, broken, pairs, 0.5, 1, rubric=rubric)
    assert any(not r["success"] and r["column"] == "clarity" for r in results)


# a two-way branch on the granularity: `== "block"`, `if block`, `is REPLY`, `granularity ==`, `"block" if ...`
BRANCH = re.compile(r"""==\s*["'](block|reply)["']|["'](block|reply)["']\s*==|\bif\s+(not\s+)?block\b|"""
                    r"""\bis\s+(not\s+)?(REPLY|BLOCK)\b|granularity\s*[!=]=|\.name\s*[!=]=\s*["'](reply|block)|"""
                    r"""["'](block|reply)["']\s+if\s|else\s+["'](block|reply)["']""")


def test_no_granularity_branch_outside_granularity_py():
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in sorted((ROOT / "mascot").rglob("*.py")) if path.name != "granularity.py"
            for n, line in enumerate(path.read_text().splitlines(), 1) if BRANCH.search(line)]
    assert not hits, "granularity branches outside mascot/granularity.py:\n" + "\n".join(hits)
    assert BRANCH.search('margin = (params.pairs if g.name == "reply" else params.group_pairs)')  # the grep can fail


def test_mascot_llm_has_no_import_circle():
    from mascot.stage_deps import _imports, module_file

    graph = {}
    for path in sorted((ROOT / "mascot/llm").glob("*.py")):
        module = f"mascot.llm.{path.stem}" if path.stem != "__init__" else "mascot.llm"
        graph[module] = sorted(m for m in _imports(path, module) if m.startswith("mascot.llm.") and module_file(m))
    print("\n" + "\n".join(f"{m} -> {', '.join(deps) or '(none)'}" for m, deps in graph.items()))

    def reaches(start, target, seen=()):
        return any(d == target or (d not in seen and reaches(d, target, (*seen, d))) for d in graph.get(start, []))
    circles = [m for m in graph if reaches(m, m)]
    assert not circles, f"import circles through {circles}"


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(aggregate="weighted"), ["weights", "one positive weight per dimension",
                                               "missing ['clarity', 'concision']"]),
    (lambda r: r.update(aggregate="weighted", weights={"concision": 1, "brevity": 2}),
     ["weights", "missing ['clarity']", "not dimensions ['brevity']"]),
    (lambda r: r.update(aggregate="mean", weights={"concision": 1, "clarity": 1}), ["only with aggregate: weighted"]),
    (lambda r: r.update(aggregate="weighted", weights={"concision": 0, "clarity": 1}), ["weights.concision",
                                                                                         "greater than 0"]),
    (lambda r: r.update(aggregate="median"), ["aggregate", "'mean', 'min' or 'weighted'"]),
])
def test_a_bad_aggregation_names_the_key(tmp_path, edit, words):
    _, error = refused(tmp_path, edit)
    assert all(w in error for w in words), error


def test_the_rubric_file_says_how_its_dimensions_combine_and_scores_pairs_and_the_gate_follow(tmp_path, personas):
    """mean (the default), min (a reply is as good as its weakest dimension) or a weighted mean: the total of
    every record, its pairs and the gate's check of the total follow the file; a journaled record judged under
    another aggregation gets the file's total without asking the judge again."""
    from mascot.annotate.score import score_candidates
    from mascot.config import PairsParams, ScoreParams
    from mascot.pairs import build_pairs
    from mascot.resume import Journal
    from mascot.validate.gate import validate_data

    scores = {"concision": 5.0, "clarity": 2.0}
    rubrics = {}
    for aggregate, extra in (("mean", {}), ("min", {}), ("weighted", {"weights": {"concision": 1, "clarity": 3}})):
        path = tmp_path / f"{aggregate}.yaml"
        path.write_text(yaml.safe_dump({**THIRD, "aggregate": aggregate, **extra}))
        rubrics[aggregate] = (path, load_rubric(path))
    assert [r.total(scores) for _, r in rubrics.values()] == [3.5, 2.0, (5 + 3 * 2) / 4]
    assert [r.aggregation for _, r in rubrics.values()] == ["mean", "min", "weighted(clarity=3,concision=1)"]

    queries = {f"q{i}": {"query_id": f"q{i}", "context": [{"role": "user", "content": "hi"}]} for i in range(2)}
    texts = ["Short and kind.", "A reply of middling length for you here.",
             "A very long reply that goes on and on and on without saying much at all, friend."]
    candidates = [{"candidate_id": f"q{i}|The Anchor|{k}", "query_id": f"q{i}", "persona": "The Anchor",
                   "candidate_index": k, "text": t} for i in range(2) for k, t in enumerate(texts)]
    journal = Journal("agg", tmp_path)

    class TwoSidedJudge:
        """Concision falls with a reply's length, clarity rises with it: mean, min and weights disagree."""
        model_name, identity, asked = "two-sided", {"backend": "fake", "model": "two-sided"}, 0

        def choice_distribution(self, prompts, choices):
            type(self).asked += len(prompts)
            out = []
            for prompt in prompts:
                words = len(prompt.split("Reply: ")[-1].split("\n")[0].split())
                short = max(1, 5 - words // 4)
                best = short if prompt.rstrip().endswith("concision:") else 6 - short
                out.append(ChoiceDistribution({c: (0.8 if int(c) == best else 0.05) for c in choices}, 0.9))
            return out
    judge = TwoSidedJudge()
    by_aggregate = {}
    for aggregate, (path, rubric) in rubrics.items():
        params = ScoreParams(rubric=str(path), mode="expected", few_shot=False)
        asked_before = judge.asked
        records = score_candidates(candidates, queries, personas, params, judge, journal)
        assert (judge.asked > 0) if aggregate == "mean" else (judge.asked == asked_before)  # ratings reused
        assert all(r["total_reward"] == round(rubric.total(r["scores"]), 4) for r in records)
        results, _ = validate_data(candidates, records, [], 0.5, 0, rubric=rubric)
        assert all(r["success"] for r in results if r["table"] == "scores"), [r for r in results if not r["success"]]
        by_aggregate[aggregate] = records
    mixed = [dict(r, total_reward=m["total_reward"]) for r, m in zip(by_aggregate["min"], by_aggregate["mean"])]
    results, _ = validate_data(candidates, mixed, [], 0.5, 0, rubric=rubrics["min"][1])
    assert any(not r["success"] and r["column"] == "total_minus_aggregate" for r in results)  # a mean total under min
    pairs = {a: build_pairs(candidates, by_aggregate[a], queries, personas, PairsParams(score_margin=0.1))
             for a in rubrics}
    assert all(p["score_chosen"] - p["score_rejected"] >= 0.1 for ps in pairs.values() for p in ps)
    chosen = {a: {(p["chosen_id"], p["rejected_id"]) for p in ps} for a, ps in pairs.items()}
    assert chosen["mean"] != chosen["min"]  # the aggregation, not the ratings, decided which reply is chosen
