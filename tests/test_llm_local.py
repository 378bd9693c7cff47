import json

import pytest

from mascot.annotate.rubric import JSON_SCHEMA, SCORE_CHOICES, parse_json_scores
from mascot.llm.backend import SampleRequest


def test_sample_n_with_stop(tiny_backend):
    out = tiny_backend.sample([SampleRequest("Person: hello\nThe Anchor:", n=3, max_tokens=8, stop=("\n",), seed=1),
                               SampleRequest([{"role": "user", "content": "hi"}], n=2, max_tokens=5, seed=2)])
    assert [len(o) for o in out] == [3, 2]
    for c in out[0]:
        assert "\n" not in c.text and c.completion_tokens <= 8 and c.finish_reason in ("stop", "length")
        assert c.prompt_tokens > 0


def test_sampling_is_seeded(tiny_backend):
    req = [SampleRequest("Person: I feel low\nThe Anchor:", n=2, max_tokens=6, seed=7)]
    assert tiny_backend.sample(req) == tiny_backend.sample(req)


def test_choice_distribution_sums_to_one(tiny_backend):
    dists = tiny_backend.choice_distribution(["Rate it: ", "Another prompt, longer than the first: "], SCORE_CHOICES)
    for d in dists:
        assert set(d.probs) == set(SCORE_CHOICES)
        assert sum(d.probs.values()) == pytest.approx(1.0)
        assert 0 < d.mass <= 1


def test_multi_token_choice_is_refused(tiny_backend):
    with pytest.raises(ValueError, match="single tokens"):
        tiny_backend.choice_distribution(["x"], ["definitely-not-one-token-choice"])


def test_grammar_constrained_json_always_parses(tiny_backend):
    # Random weights: only the grammar can make this valid JSON with in-range integer scores.
    replies = tiny_backend.json_complete(["Rate: ", "JSON: "], JSON_SCHEMA, max_tokens=400)
    for r in replies:
        scores, reasons = parse_json_scores(r.text)
        assert all(1 <= s <= 5 for s in scores.values())
        assert set(json.loads(r.text)) == set(scores)


def test_shared_prefix_cache_matches_plain_forward(tiny_backend):
    import torch

    head = "A long shared rubric head that every judge prompt starts with. " * 6
    prompts = [head + tail for tail in ("Reply: yes\nscore: ", "Reply: a much longer reply here\nscore: ",
                                        "Reply: no\nempathy: ")]
    cached = tiny_backend.choice_distribution(prompts, SCORE_CHOICES)
    ids = torch.tensor(tiny_backend.choice_token_ids(SCORE_CHOICES))
    plain = tiny_backend._choice_distribution_plain(prompts, ids, SCORE_CHOICES)
    for a, b in zip(cached, plain):
        assert a.mass == pytest.approx(b.mass, rel=1e-4)
        for c in SCORE_CHOICES:
            assert a.probs[c] == pytest.approx(b.probs[c], rel=1e-4)
