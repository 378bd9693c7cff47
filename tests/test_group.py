"""Stage 2: directives, branching episodes, the collective rubric, block pairs, their gate, the group reward
input, and the Director's rewards."""
import json

import pytest

from mascot.annotate.director import DirectiveError, parse_directive
from mascot.annotate.episodes import (Branch, DirectorPerBranch, LLMDirector, Sampling, ScriptedDirector,
                                      episode_metrics, generate_episodes, roll_forward)
from mascot.annotate.rubric import COLLECTIVE, PERSONA
from mascot.config import EpisodesParams, PairsParams
from mascot.granularity import BLOCK
from mascot.resume import Journal

AGENTS = ["The Anchor", "The Catalyst", "The Beacon", "Action Guide"]


@pytest.mark.parametrize("text,agent", [
    ("Agent: Anchor\nAction: Validate the guilt.\nTone: Calm and empathetic", "The Anchor"),
    ("**Agent:** the catalyst\n**Action:** Ask what evidence there is.\n**Tone:** curious\nmore text", "The Catalyst"),
    ("Sure!\nAGENT: Action Guide\nACTION: Suggest one step.\nTONE: practical", "Action Guide"),
    # inline, as the method writes it; and as the embedded Director often does (Tone on the Action line)
    ("Agent: Anchor / Action: Validate the user's feelings of guilt. / Tone: Calm and empathetic", "The Anchor"),
    ("Agent:The Beacon\nAction: Name one strength. Tones: Warm, hopeful.\n\nAgent: The Catalyst", "The Beacon"),
])
def test_directives_parse_with_known_agents(text, agent):
    d = parse_directive(text, AGENTS)
    assert d.agent == agent and d.action and d.tone
    assert "Tone" not in d.action and "/" not in d.action and "\n" not in d.tone


@pytest.mark.parametrize("text,reason", [
    ("Agent: Bob\nAction: x\nTone: y", "unknown agent 'Bob'"),
    ("Agent: The Beacon\nAction: Cheer them on.", r"missing or empty field\(s\): tone"),
    ("The Anchor should speak next.", "agent, action, tone"),
    ("Agent:Action Guide\nAction: Offer to help you get started with YouTube.", "tone"),  # cut off by the budget
])
def test_bad_directives_are_errors_with_the_reason(text, reason):
    with pytest.raises(DirectiveError, match=reason):
        parse_directive(text, AGENTS)


class ScriptedText:
    """A Director backend that writes given texts (an unparseable one among them); a fake for this unit
    test of the rollout logic (the tiny-model and default runs use the real in-process backend)."""
    model_name = "scripted"
    identity = {"backend": "fake", "model": "scripted"}

    def __init__(self, texts):
        self.texts = texts

    def sample(self, requests, progress=None):
        from mascot.llm.backend import Completion
        return [[Completion(self.texts[(k + i) % len(self.texts)], 5, 5, "stop") for k in range(r.n)]
                for i, r in enumerate(requests)]


def test_episodes_branch_roll_forward_and_record_invalid_directives(tiny_backend, personas, demo_queries):
    # completions continue the prompt's "Agent:"
    texts = [" The Anchor\nAction: Validate.\nTone: warm", " Nobody\nAction: x\nTone: y",
             " Action Guide\nAction: One step.\nTone: clear"]
    director = LLMDirector(ScriptedText(texts), personas, "chat", Sampling())
    params = EpisodesParams(branches=3, agent_turns=2, user_turns=True, max_tokens=6)
    episodes = generate_episodes(demo_queries[:2], personas, params, director, tiny_backend, chunk_size=1)
    assert len(episodes) == 6 and [e["branch"] for e in episodes[:3]] == [0, 1, 2]
    invalid = [e for e in episodes if not e["valid"]]
    assert invalid, "one scripted directive names an unknown agent"
    for e in invalid:  # recorded as such, with the raw text; never replaced by a guess
        assert "unknown agent 'Nobody'" in e["invalid_reason"] and e["invalid_raw"].startswith("Agent: Nobody")
    for e in (e for e in episodes if e["valid"]):
        roles = [t["role"] for t in e["turns"]]
        assert roles == ["agent", "user", "agent"]  # N = 2 agent turns with a simulated user turn between
        first = e["turns"][0]
        assert first["directive"]["agent"] == first["speaker"] and first["directive"]["raw"]
        assert {"prompt_tokens", "completion_tokens", "finish_reason"} <= set(first)
    m = episode_metrics(episodes)
    assert m["valid_branches"] + m["invalid_branches"] == 6 and m["invalid_reasons"] == {"unknown agent": len(invalid)}


def test_episodes_resume_from_the_journal_to_the_same_records(tiny_backend, personas, demo_queries, tmp_path):
    params = EpisodesParams(branches=2, agent_turns=2, max_tokens=6, director="random")
    director = ScriptedDirector(personas, "random", 3)
    clean = generate_episodes(demo_queries, personas, params, director, tiny_backend, Journal("e", tmp_path / "a"),
                              chunk_size=1)

    class Dies:
        model_name, identity, calls = tiny_backend.model_name, tiny_backend.identity, 0

        def sample(self, requests, progress=None):
            Dies.calls += 1
            if Dies.calls > 2:  # one chunk (two turns) done, then the server is gone
                raise RuntimeError("server died")
            return tiny_backend.sample(requests, progress)

    with pytest.raises(RuntimeError):
        generate_episodes(demo_queries, personas, params, director, Dies(), Journal("e", tmp_path / "b"), chunk_size=1)
    assert Journal("e", tmp_path / "b").resumed == 1
    stats = {}
    resumed = generate_episodes(demo_queries, personas, params, director, tiny_backend,
                                Journal("e", tmp_path / "b"), chunk_size=1, stats=stats)
    assert stats["reused"] == 1 and resumed == clean


def test_scripted_orders(personas):
    branches = [Branch("q1", 0, [{"role": "user", "content": "hi"}])]
    rr = ScriptedDirector(personas, "round_robin")
    first = parse_directive(rr.propose(branches)[0][0], AGENTS).agent
    branches[0].turns.append({"role": "agent", "speaker": first, "text": "x"})
    second = parse_directive(rr.propose(branches)[0][0], AGENTS).agent
    assert AGENTS.index(second) == (AGENTS.index(first) + 1) % 4
    with pytest.raises(ValueError, match="unknown speaking order"):
        ScriptedDirector(personas, "alphabetical")


def test_one_rollout_of_several_directors_asks_each_only_for_its_own_branches(tiny_backend, personas):
    class Recording(ScriptedDirector):
        def propose(self, branches, n=1):
            self.asked = getattr(self, "asked", []) + [b.query_id for b in branches]
            return super().propose(branches, n)

    rr, rnd = Recording(personas, "round_robin"), Recording(personas, "random", 3)
    ours = [Branch(f"q{i}", 0, [{"role": "user", "content": "hi"}]) for i in range(4)]
    alone = [Branch(f"q{i}", 0, [{"role": "user", "content": "hi"}]) for i in (0, 2)]
    director_of = {id(b): rr if i % 2 == 0 else rnd for i, b in enumerate(ours)}
    roll_forward(ours, 2, DirectorPerBranch(director_of), tiny_backend, personas, Sampling(0.0, 1.0, 4, 0))
    assert rr.asked == ["q0", "q2"] * 2 and rnd.asked == ["q1", "q3"] * 2
    roll_forward(alone, 2, ScriptedDirector(personas, "round_robin"), tiny_backend, personas, Sampling(0.0, 1.0, 4, 0))
    # greedy: the same speakers, in the same order, as a rollout of that director alone
    assert [[t["speaker"] for t in b.turns] for b in ours[::2]] == [[t["speaker"] for t in b.turns] for b in alone]
    assert [[t["text"] for t in b.turns] for b in ours[::2]] == [[t["text"] for t in b.turns] for b in alone]


def test_the_collective_rubric_is_data_on_the_same_prompt_code():
    item = "Companions: x.\nConversation so far:\nPerson: hi\nBlock:\nThe Anchor: hello\n"
    prompts = COLLECTIVE.expected_prompts(item, True, "plain")
    assert list(prompts) == ["fidelity", "engagement_contribution", "originality_specificity", "group_coherence"]
    assert "Now rate this block." in prompts["fidelity"] and "Example 2" in prompts["fidelity"]
    assert set(COLLECTIVE.json_schema["required"]) == set(prompts) and set(PERSONA.json_schema["required"]) != set(prompts)
    scores, _ = COLLECTIVE.parse_json(json.dumps({d: {"reason": "cites the block turns", "score": 2} for d in prompts}))
    assert COLLECTIVE.total(scores) == 2.0


def block_data():
    """Two prefixes, three scored branches each; one branch of p1 invalid (unscored)."""
    episodes, scores = [], []
    for prefix, totals in (("p1", [4.0, 2.0, None]), ("p2", [3.0, 3.05, 1.0])):
        for b, total in enumerate(totals):
            eid = f"{prefix}|b{b}"
            turns = [{"role": "agent", "speaker": AGENTS[b], "text": f"{prefix} turn {b} " + "word " * b},
                     {"role": "agent", "speaker": AGENTS[b + 1], "text": "next"}]
            episodes.append({"episode_id": eid, "query_id": prefix, "prefix_id": prefix, "branch": b,
                             "valid": total is not None, "invalid_reason": None if total else "x", "turns": turns})
            scores.append({"episode_id": eid, "query_id": prefix, "prefix_id": prefix, "branch": b,
                           "status": "scored" if total else "unscored", "total_reward": total,
                           "scores": {d: total for d in COLLECTIVE.dimensions} if total else None,
                           "unscored_reason": None if total else "invalid branch: x"})
    queries = {p: {"query_id": p, "context": [{"role": "user", "content": f"help {p}"}]} for p in ("p1", "p2")}
    return episodes, scores, queries


def test_block_pairs_stay_within_a_prefix_over_the_margin():
    from mascot.pairs import build_block_pairs

    episodes, scores, queries = block_data()
    pairs = build_block_pairs(episodes, scores, queries, PairsParams(score_margin=0.5, eval_fraction=0.0))
    assert [p["pair_id"] for p in pairs] == ["p1|b0>p1|b1", "p2|b0>p2|b2", "p2|b1>p2|b2"]  # 3.05 vs 3.0: under
    p = pairs[0]
    assert p["granularity"] == "block" and p["prefix_id"] == "p1" and p["chosen"][0]["name"] == "The Anchor"
    assert all(x["score_chosen"] - x["score_rejected"] >= 0.5 for x in pairs)


def test_the_gate_checks_block_pairs_with_the_same_invariants():
    from mascot.pairs import build_block_pairs
    from mascot.validate.gate import validate_data

    episodes, scores, queries = block_data()
    pairs = build_block_pairs(episodes, scores, queries, PairsParams(score_margin=0.5, eval_fraction=0.0))
    results, _ = validate_data(episodes, scores, pairs, 0.5, 1, granularity=BLOCK)
    assert all(r["success"] for r in results), [r for r in results if not r["success"]]
    bad = [dict(pairs[0]), dict(pairs[1])]
    bad[0]["rejected_id"] = bad[0]["chosen_id"]  # a self-pair
    bad[1].update(rejected_id="p1|b1", prefix_id="p2")  # sides from two prefixes
    results, quarantine = validate_data(episodes, scores, bad, 0.5, 1, granularity=BLOCK)
    failed = {r["column"] for r in results if not r["success"]}
    assert {"self_pair", "same_group"} <= failed and {q["row"] for q in quarantine} == {0, 1}


def test_group_reward_input_cuts_the_prefix_never_the_block(tiny_model_dir):
    from transformers import AutoTokenizer

    from mascot.granularity import BLOCK, CUT_MARK
    from mascot.reward.prompt import reward_input_ids

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    context = [{"role": "user", "content": f"old turn {i} " + "filler " * 30} for i in range(6)]
    context.append({"role": "user", "content": "the last thing I said"})
    block = [{"role": "assistant", "name": "The Anchor", "content": "first block turn"},
             {"role": "assistant", "name": "Action Guide", "content": "second block turn"}]
    full, cut = reward_input_ids(tok, BLOCK, None, context, block, 4096)
    short, cut2 = reward_input_ids(tok, BLOCK, None, context, block, len(full) // 2)
    text = tok.decode(short)
    assert not cut and cut2 and len(short) <= len(full) // 2
    assert "first block turn" in text and "second block turn" in text and "old turn 0" not in text
    assert CUT_MARK.strip() in text
    with pytest.raises(ValueError, match="the block is never cut"):
        reward_input_ids(tok, BLOCK, None, context, block * 40, 64)


def test_director_rewards_format_diversity_and_a_floor_for_unparseable(tiny_backend, personas):
    from mascot.config import DirectorParams
    from mascot.policy.director import make_director_rewards

    class LengthScorer:
        def score(self, items):
            return [float(sum(len(m["content"]) for m in block)) for _, _, block in items]

    rm, fmt, div = make_director_rewards(LengthScorer(), tiny_backend, personas,
                                         DirectorParams(rollout_turns=1, prompt_style="transcript"),
                                         Sampling(max_tokens=4))
    completions = [" The Anchor\nAction: Validate.\nTone: warm", " Nobody\nAction: x\nTone: y",
                   " Action Guide\nAction: One step.\nTone: clear"]
    cols = dict(query_id=["q"] * 3, context=[json.dumps([{"role": "user", "content": "hi"}])] * 3,
                turns=[json.dumps([])] * 3, previous_speaker=["The Anchor", "", ""])
    assert fmt(None, completions) == [1.0, 0.0, 1.0]
    assert div(None, completions, **cols) == [-1.0, 0.0, 0.0]  # The Anchor again after The Anchor
    rewards = rm(None, completions, **cols)
    assert rewards[1] == min(rewards[0], rewards[2]) - 1.0  # below the worst parseable directive


def test_director_states_and_group_evaluation_figures(personas):
    from mascot.config import DirectorParams
    from mascot.policy.director import director_states
    from mascot.policy.evaluate_group import condition_metrics, turn_units

    episodes, scores, queries = block_data()
    rows = director_states(episodes, queries, personas, DirectorParams())
    # one branch-point state per prefix, and one after the first agent turn per valid branch
    assert len(rows) == 2 + 5 and rows[0]["previous_speaker"] == "" and rows[1]["previous_speaker"] == "The Anchor"
    assert rows[0]["prompt"].endswith("Agent:") and json.loads(rows[1]["turns"])[0]["speaker"] == "The Anchor"
    units = turn_units([e for e in episodes if e["valid"]], queries, personas)
    assert len(units) == 10 and units[1]["fields"]["persona"] == "The Catalyst"
    assert "The Anchor: p1 turn 0" in units[1]["item"]  # the second turn's judge sees the first under its speaker
    turn_scores = [{"status": "scored", "total_reward": 3.0, "scores": {d: 3.0 for d in PERSONA.dimensions}}] * 4
    m = condition_metrics(episodes, scores, turn_scores, {"p1": 0.5, "p2": 1.5})
    assert m["conversations"] == 6 and m["valid_conversations"] == 5 and m["collective_scored"] == 5
    assert m["collective_total"] == round((4 + 2 + 3 + 3.05 + 1) / 5, 4) and m["group_rm_score"] == 1.0
    assert m["speaker_usage"]["The Catalyst"] == 4 and m["same_speaker_twice_rate"] == 0.0


def test_block_pairs_split_over_the_prefixes_that_formed_pairs():
    from mascot.pairs import build_block_pairs

    episodes, scores, queries = block_data()
    pairs = build_block_pairs(episodes, scores, queries, PairsParams(score_margin=0.5, eval_fraction=0.9))
    assert {p["split"] for p in pairs} == {"train", "eval"}  # never all eval, never all train


def test_a_failed_conversation_counts_at_the_floor_in_the_comparison():
    """A Director whose directives fail is not scored on its successes only: its failed conversations count at
    the rubric's floor, the valid rate is reported, and the paired comparison includes them."""
    from mascot.policy.evaluate_group import collective_totals, condition_metrics, paired_vs

    records = [{"episode_id": f"q{i}|b0", "query_id": f"q{i}", "valid": i != 2, "turns": []} for i in range(4)]
    scores = [{"episode_id": f"q{i}|b0", "query_id": f"q{i}", "status": "scored", "total_reward": 4.0,
               "scores": {d: 4.0 for d in COLLECTIVE.dimensions}} for i in range(4) if i != 2]
    m = condition_metrics(records, scores, [], {})
    assert (m["valid_rate"], m["failed_conversations"], m["collective_total"]) == (0.75, 1, 4.0)
    assert m["collective_total_with_failures"] == round((4.0 * 3 + 1.0) / 4, 4)
    random = {f"q{i}": 3.0 for i in range(4)}
    fig = paired_vs(random, collective_totals(records, scores))
    assert fig["n"] == 4 and fig["mean"] == round((1.0 * 3 - 2.0) / 4, 4) and fig["too_few_to_tell"]


def test_a_directors_gain_is_also_given_at_equal_block_length():
    """trained - random on blocks whose score is their length: the raw gain is there, at equal length it is not."""
    from mascot.policy.evaluate_group import block_words, describe_results, paired_vs

    def records(words):
        return [{"query_id": f"q{i}", "turns": [{"role": "user", "text": "hi"},
                                                {"role": "agent", "text": "w " * w}]} for i, w in enumerate(words)]

    random_words = [10 + (i % 5) for i in range(12)]
    trained_words = [w + 2 + (i % 4) * 3 - 3 for i, w in enumerate(random_words)]  # longer on the whole, not always
    lengths = (block_words(records(random_words)), block_words(records(trained_words)))
    random = {q: 2.0 + 0.1 * w for q, w in lengths[0].items()}
    trained = {q: 2.0 + 0.1 * w for q, w in lengths[1].items()}
    fig = paired_vs(random, trained, 10, lengths, {f"q{i}": f"c{i // 2}" for i in range(12)})
    assert fig["mean"] > 0 and fig["equal_length"]["mean"] == 0.0 and fig["equal_length"]["clusters"] == 6
    lines = describe_results({"minus_random_collective_total": {"trained": fig}}, [], 12, 1, 10)
    assert any(line.strip().startswith("at equal length") for line in lines)
    # the trained Director against the base one (what GRPO did), printed first, also at equal length
    lines = describe_results({"trained_minus_base_collective_total": fig,
                              "minus_random_collective_total": {"trained": fig}}, [], 12, 1, 10)
    said = [line.strip() for line in lines[3:]]
    assert said[0].startswith("trained - base, collective total with failures, paired:")
    assert said[1].startswith("at equal length") and said[2].startswith("trained - random")


def test_a_condition_is_judged_from_its_records_alone(personas):
    """evaluate_group's core: a condition's records, a judge and a group reward model in, its figures, totals and
    judged records out; no file, no server."""
    from mascot.policy.evaluate_group import describe_results, judge_condition

    records = [{"episode_id": f"q{i}|b0", "query_id": f"q{i}", "prefix_id": f"q{i}", "branch": 0, "valid": i != 1,
                "invalid_reason": None if i != 1 else "no directive",
                "turns": [{"role": "agent", "speaker": "The Anchor", "text": f"turn {i}"}]} for i in range(3)]
    by_q = {f"q{i}": {"query_id": f"q{i}", "context": [{"role": "user", "content": "hi"}]} for i in range(3)}
    asked = []

    def score(units, rubric):
        asked.append((rubric.name, len(units)))
        return [{**u["fields"], "status": "skipped" if u.get("skip") else "scored",
                 "total_reward": None if u.get("skip") else 3.0,
                 "scores": None if u.get("skip") else {d: 3.0 for d in rubric.dimensions}} for u in units]

    metrics, totals, judged = judge_condition(records, by_q, personas, (COLLECTIVE, PERSONA), score,
                                              lambda rows: [0.5 * (k + 1) for k in range(len(rows))])
    assert asked == [(COLLECTIVE.name, 3), (PERSONA.name, 3)]  # every conversation's block, and each of its turns
    assert totals == {"q0": 3.0, "q1": 1.0, "q2": 3.0}  # the failed conversation at the rubric's floor
    assert [r["group_rm_score"] for r in judged] == [0.5, None, 1.0]
    assert metrics["valid_rate"] == round(2 / 3, 4) and metrics["collective_total"] == 3.0
    lines = describe_results({"random": metrics, "minus_random_collective_total": {}}, ["random"], 3, 2, 10)
    assert lines[0].startswith("evaluate_group: 3 held-out conversations") and "random" in lines[2]


def test_evaluate_group_resumes_its_judging_per_condition_and_rubric(personas, tiny_backend, tmp_path):
    """A killed evaluate_group loses no judgement: rerun on the same (seeded) conversations, every condition's
    collective and per-reply scores come back from its journals without a judge call; the journals do not
    overwrite each other across conditions and rubrics; a changed conversation is judged again."""
    from types import SimpleNamespace

    from mascot.config import ScoreParams
    from mascot.policy.evaluate_group import judge_condition
    from mascot.stages.evaluate_group import journaled_score

    class Counting:
        def __init__(self, inner):
            self.inner, self.model_name, self.identity, self.prompts = inner, inner.model_name, inner.identity, 0

        def choice_distribution(self, prompts, choices, progress=None):
            self.prompts += len(prompts)
            return self.inner.choice_distribution(prompts, choices, progress)

    judge, params = Counting(tiny_backend), SimpleNamespace(score=ScoreParams(few_shot=False))
    by_q = {f"q{i}": {"query_id": f"q{i}", "context": [{"role": "user", "content": "I feel stuck."}]} for i in range(2)}

    def records(condition, word="ok"):
        return [{"episode_id": f"q{i}|b0", "query_id": f"q{i}", "prefix_id": f"q{i}", "branch": 0, "valid": True,
                 "invalid_reason": None, "turns": [{"role": "agent", "speaker": "The Anchor",
                                                    "text": f"{condition} {word} {i}"}]} for i in range(2)]

    def judge_all(word="ok"):
        return [judge_condition(records(c, word), by_q, personas, (COLLECTIVE, PERSONA),
                                journaled_score(params, c, (COLLECTIVE, judge, judge), "plain", tmp_path),
                                lambda rows: [0.0] * len(rows))[1:] for c in ("trained", "random")]

    first = judge_all()
    asked = judge.prompts
    assert asked > 0 and len(list(tmp_path.glob("evaluate_group-*.jsonl"))) == 4  # 2 conditions x 2 rubrics
    assert judge_all() == first and judge.prompts == asked  # all reused: not one judge call
    judge_all("changed")
    assert judge.prompts == 2 * asked  # other conversations, judged anew


def test_evaluate_group_refuses_held_out_conversations_that_were_given_episodes():
    """evaluate_group's conversations are held out: an episodes file with one of them (older than the held-out
    rule) is refused with what to rerun, and the held-out set is otherwise the first max_queries by id."""
    from mascot.config import HeldOutParams
    from mascot.io import InputError
    from mascot.policy.evaluate_group import heldout_conversations

    queries = [{"query_id": f"q{i}", "conversation_id": f"c{i}"} for i in range(40)]
    heldout = HeldOutParams(fraction=0.5, seed=0)
    chosen = heldout_conversations(queries, [], heldout, 5)
    assert len(chosen) == 5 and [q["query_id"] for q in chosen] == sorted(q["query_id"] for q in chosen)
    with pytest.raises(InputError, match=rf"held-out queries \['{chosen[2]['query_id']}'\] were given episodes"):
        heldout_conversations(queries, [{"query_id": chosen[2]["query_id"]}], heldout, 5)


def test_evaluate_group_measures_each_llm_directors_free_parse_rate(personas, demo_queries):
    """Beside the constrained comparison, each language-model Director's first directive of every conversation
    is decoded without the grammar (the request carries no regex) and its parse rate kept; a scripted Director
    has none."""
    from mascot.policy.evaluate_group import unconstrained_parse_rates

    class Recording(ScriptedText):
        def sample(self, requests, progress=None):
            self.regexes, self.temperatures = [r.regex for r in requests], [r.temperature for r in requests]
            return super().sample(requests, progress)

    backend = Recording(["Agent: The Anchor\nAction: Validate.\nTone: warm", "Agent: Nobody\nAction: x\nTone: y"])
    directors = {"trained": LLMDirector(backend, personas, "chat", Sampling(), constrained=True, prefill=False),
                 "random": ScriptedDirector(personas, "random")}
    queries = demo_queries[:3]
    rates = unconstrained_parse_rates(directors, queries, samples=2, temperature=1.0)
    assert backend.regexes == [None] * 3 and set(rates) == {"trained"}
    assert backend.temperatures == [1.0] * 3 and directors["trained"].sampling.temperature == 0.9  # its own kept
    # two samples a conversation, the texts in turn: each conversation gets one that parses and one that does not
    assert {k: rates["trained"][k] for k in ("directives", "parse_rate", "invalid_reasons")} == {
        "directives": 6, "parse_rate": 0.5, "invalid_reasons": {"unknown agent": 3}}
    assert rates["trained"]["by_query"] == {q["query_id"]: 0.5 for q in queries}


def test_free_parse_rate_counts_as_the_flat_count_does(personas, demo_queries):
    """episodes and evaluate_group share one free-sampling measure: parsed once per directive, it gives the flat
    count's figures (its reasons in the same order) and each query's own rate; without a temperature the
    Director's own is used, and no request carries the grammar."""
    from mascot.annotate.episodes import free_parse_rate, parse_rate

    class Recording(ScriptedText):
        def sample(self, requests, progress=None):
            self.requests = requests
            return super().sample(requests, progress)

    texts = ["Agent: Nobody\nAction: x\nTone: y", "Agent: The Anchor\nAction: Validate.\nTone: warm", "just words"]
    backend = Recording(texts)
    director = LLMDirector(backend, personas, "chat", Sampling(temperature=0.7), constrained=True, prefill=False)
    queries = demo_queries[:3]
    rate = free_parse_rate(director, queries, n=2, turns=-1)
    assert [r.regex for r in backend.requests] == [None] * 3 and {r.temperature for r in backend.requests} == {0.7}
    expected = parse_rate([texts[(k + i) % 3] for i in range(3) for k in range(2)], list(personas))
    assert {k: rate[k] for k in ("directives", "parse_rate", "invalid_reasons")} == expected
    assert list(rate["invalid_reasons"]) == list(expected["invalid_reasons"]) == ["unknown agent", "missing field"]
    assert rate["by_query"] == {q["query_id"]: v for q, v in zip(queries, (0.5, 0.5, 0.0))}


def test_the_planted_feature_is_who_had_the_floor_first_and_trained_is_compared_paired():
    from mascot.policy.evaluate_group import describe_results, planted_feature, planted_figures

    def record(q, first, valid=True):
        return {"query_id": q, "valid": valid, "turns": [{"role": "agent", "speaker": first, "text": "x"},
                                                        {"role": "agent", "speaker": "The Beacon", "text": "y"}]}
    trained = planted_feature([record(f"q{i}", "The Beacon") for i in range(12)], "The Beacon")
    base = planted_feature([record(f"q{i}", "The Anchor" if i % 4 else "The Beacon") for i in range(12)], "The Beacon")
    failed = planted_feature([record("q0", "The Beacon", valid=False), record("q1", "The Anchor")], "The Beacon")
    assert failed == {"q0": 0.0, "q1": 0.0}  # a failed conversation never counts as the feature; the second turn never
    fig = planted_figures({"trained": trained, "base": base}, "The Beacon", min_n=10)
    assert fig["rate"]["trained"]["mean"] == 1.0 and fig["rate"]["base"]["mean"] == 0.25
    assert fig["trained_minus_base"]["mean"] == 0.75 and fig["trained_minus_base"]["ci_low"] > 0
    assert fig["trained_minus_base"]["n"] == 12 and "trained_minus_random" not in fig
    metrics = {"conversations": 12, "valid_rate": 1.0, "failed_conversations": 0, "collective_total_with_failures": 3,
               "collective_total": 3, "per_reply_total": 3, "group_rm_score": 0.1, "speaker_usage": {}}
    lines = describe_results({"trained": metrics, "base": metrics, "planted_feature": fig}, ["trained", "base"], 12, 2, 10)
    assert any("trained - base, planted feature" in line and "0.75" in line for line in lines)


def test_a_batch_with_no_parseable_directive_is_paid_the_runs_floor_not_zero(tiny_backend, personas):
    """A group reward model may score every block below 0; a batch whose directives all fail to parse was paid 0.0,
    above every block, so a Director's reward fell as its format rose (the evidence run). The floor is one for the
    run, below every episode block the reward model scores."""
    from mascot.config import DirectorParams
    from mascot.policy.director import make_director_rewards, unparseable_floor

    class NegativeScorer:
        def score(self, items):
            return [-8.0 - 0.01 * sum(len(m["content"]) for m in block) for _, _, block in items]

    q = {"query_id": "q", "context": [{"role": "user", "content": "hi"}]}
    episodes = [{"query_id": "q", "valid": True, "turns": [{"role": "agent", "speaker": "The Anchor", "text": t}]}
                for t in ("short", "a much longer turn")]
    floor = unparseable_floor(NegativeScorer(), episodes, {"q": q})
    assert floor == round(-8.0 - 0.01 * len("a much longer turn") - 1.0, 4)
    rm, _, _ = make_director_rewards(NegativeScorer(), tiny_backend, personas,
                                     DirectorParams(rollout_turns=1, prompt_style="transcript"), Sampling(max_tokens=4),
                                     floor=floor)
    cols = dict(query_id=["q"] * 2, context=[json.dumps(q["context"])] * 2, turns=[json.dumps([])] * 2,
                previous_speaker=["", ""])
    assert rm(None, [" Nobody\nAction: x\nTone: y", "no directive at all"], **cols) == [floor, floor]


def test_the_survey_pair_figure_counts_conversations_apart_by_the_gap_and_resamples_conversations():
    """Of two conversations whose survey differs by 2 or more, is the better-rated one scored higher: pairs under
    the gap are left out, a tie is half, and the interval comes from conversations drawn again."""
    from mascot.stats import conversation_pairs_agreement

    ratings = [1, 2, 3, 4, 5, 5]
    scores = [0.1, 0.9, 0.3, 0.4, 0.8, 0.8]
    fig = conversation_pairs_agreement(scores, ratings, list("abcdef"), min_gap=2)
    # pairs (a,c) (a,d) (a,e) (a,f) (b,d) (b,e) (b,f) (c,e) (c,f): 9 pairs; b (0.9) above d, e, f loses 3
    assert fig["n"] == 9 and fig["mean"] == round(6 / 9, 4) and fig["clusters"] == 6
    assert fig["ci_low"] <= fig["mean"] <= fig["ci_high"] and fig["too_few_to_tell"]
    assert conversation_pairs_agreement([1.0, 1.0], [1, 5], ["x", "y"], 2)["mean"] == 0.5  # a tie


def test_the_survey_set_takes_surveyed_conversations_apart_from_the_queries_and_the_reference_items(corpora):
    """judge_check_group.survey_items: human blocks of surveyed conversations (the hub's ESConv copy carries the
    survey), none of the queries' conversations and none of the reference items'; judge and group reward model are
    held to it with Spearman and the pair figure per survey key."""
    from mascot.annotate.reference_set import build_block_reference_set
    from mascot.annotate.survey import flat_survey_figures, survey_figures
    from mascot.data.sources.esconv import load_esconv
    from mascot.io import BadRows

    dialogues = load_esconv(corpora / "esconv-hub-valid.jsonl", BadRows())
    names = ["The Anchor", "The Catalyst", "The Beacon", "Action Guide"]
    exclude = {d.id for d in dialogues[:20]}
    items = build_block_reference_set(dialogues, names, 64, lambda t: len(t.split()), 4, exclude=exclude,
                                      survey_items=60)
    reference = [i for i in items if i["kind"] == "dialogue"]
    survey = [i for i in items if i["kind"] == "survey"]
    assert len(reference) == 4 and len(survey) == 60
    assert not {i["conversation_id"] for i in survey} & ({i["conversation_id"] for i in reference} | exclude)
    assert all(list(i["blocks"]) == ["reference"] and i["survey"] for i in survey)
    words = [(i["survey"], i["conversation_id"], float(sum(len(m["content"].split()) for m in i["blocks"]["reference"])))
             for i in items]
    flat = flat_survey_figures(survey_figures(words, 2, 10))
    assert flat["survey_empathy_n"] >= 50 and flat["survey_empathy_pairs_n"] > 0
    assert flat["survey_emotion_drop_n"] >= 50 and flat["survey_relevance_spearman_ci_low"] is not None
    assert flat["survey_empathy_too_few_to_tell"] is False
    few = flat_survey_figures(survey_figures(words[:3], 2, 10))  # a figure on 3 conversations says it cannot tell
    assert few["survey_empathy_n"] == 3 and few["survey_empathy_too_few_to_tell"] is True


def test_the_choice_probe_gives_the_grammars_distribution_over_the_agents(tiny_model_dir, personas):
    """At the directive's choice point the probe renormalises each name's tokens over the names that continue the
    same start (the grammar's token-by-token draw): a distribution over the team, from the policy's own logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mascot.policy.choice_probe import ChoiceProbe, choice_distribution

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    names = list(personas)
    probs = choice_distribution(model, tokenizer, "Conversation so far:\nPerson: hi\n\nDirective:\nAgent:", names)
    assert set(probs) == set(names) and abs(sum(probs.values()) - 1) < 1e-4 and all(0 < v < 1 for v in probs.values())
    probe = ChoiceProbe(["Person: hi\nAgent:", "Person: I lost my job\nAgent:"], names, "transcript")
    probe.measure(model, 0, tokenizer)
    probe.measure(model, 1, tokenizer)
    figures = probe.figures()
    assert [h["step"] for h in figures["choice_probe"]] == [0, 1] and figures["choice_probe"][1]["kl_from_first"] == 0


def test_a_steps_choice_record_centres_the_reward_in_each_prompts_group():
    from mascot.annotate.director import Directive
    from mascot.policy.director import choice_record

    def d(agent):
        return Directive(agent, "ask", "warm")

    record = choice_record([d("The Beacon"), d("The Anchor"), d("The Beacon"), None],
                           [3.0, 1.0, 5.0, 5.0], [[0, 1], [2, 3]])
    assert record["chosen"] == {"The Beacon": 2, "The Anchor": 1, "(unparsed)": 1}
    assert record["advantage"] == {"The Beacon": 0.5, "The Anchor": -1.0, "(unparsed)": 0.0}
    assert record["reward_spread_within_groups"] == 0.5
