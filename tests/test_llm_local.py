import json

import pytest

from mascot.annotate.rubric import PERSONA, SCORE_CHOICES
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
    replies = tiny_backend.json_complete(["Rate: ", "JSON: "], PERSONA.json_schema, max_tokens=1500)
    for r in replies:
        scores, reasons = PERSONA.parse_json(r.text)
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


def test_two_level_prefix_reuse_matches_plain_forward(tiny_backend):
    """Several candidates x five dimension prompts: the head, each candidate's middle and the tails."""
    import torch

    head = "A long shared rubric head that every judge prompt starts with. " * 6
    prompts = [f"{head}Reply: {reply}\nRatings:\n{dim}: " for reply in ("yes indeed, quite so", "no, never, not once")
               for dim in ("empathy", "relevance", "persona")]
    cached = tiny_backend.choice_distribution(prompts, SCORE_CHOICES)
    ids = torch.tensor(tiny_backend.choice_token_ids(SCORE_CHOICES))
    plain = tiny_backend._choice_distribution_plain(prompts, ids, SCORE_CHOICES)
    for a, b in zip(cached, plain):
        for c in SCORE_CHOICES:
            assert a.probs[c] == pytest.approx(b.probs[c], rel=1e-4)


def test_the_bf16_judge_path_agrees_with_fp32_within_bf16_rounding(tiny_backend, tiny_model_dir):
    """The stages compute in bf16 where the CPU is native (mascot/precision.py): the same prefix reuse, in bf16,
    gives the fp32 distributions to within bf16's rounding."""
    import torch

    from mascot.config import LLMEndpoint
    from mascot.llm.local_backend import LocalBackend

    bf16 = LocalBackend(LLMEndpoint(model=str(tiny_model_dir), batch_size=8, dtype="bfloat16"))
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    head = "A long shared rubric head that every judge prompt starts with. " * 6
    prompts = [f"{head}Reply: {reply}\nRatings:\n{dim}: " for reply in ("yes indeed", "no, never")
               for dim in ("empathy", "relevance")]
    for a, b in zip(bf16.choice_distribution(prompts, SCORE_CHOICES),
                    tiny_backend.choice_distribution(prompts, SCORE_CHOICES)):
        assert a.mass == pytest.approx(b.mass, abs=0.02)
        expected = [sum(int(c) * d.probs[c] for c in SCORE_CHOICES) for d in (a, b)]
        assert expected[0] == pytest.approx(expected[1], abs=0.05)


def test_shared_prefill_of_n_samples_matches_separate_prefill(tiny_backend):
    chat = [{"role": "system", "content": "You are kind and brief."}, {"role": "user", "content": "I lost my job."}]
    reqs = [SampleRequest(chat, n=3, temperature=0.0, max_tokens=6), SampleRequest("Person: hi\nX:", n=2,
                                                                                   temperature=0.0, max_tokens=6)]
    shared = tiny_backend.sample(reqs)
    original = tiny_backend._shared_prefill
    tiny_backend._shared_prefill = lambda texts: (tiny_backend._encode(texts), None)
    try:
        separate = tiny_backend.sample(reqs)
    finally:
        tiny_backend._shared_prefill = original
    assert [[c.text for c in o] for o in shared] == [[c.text for c in o] for o in separate]


def test_chat_prefill_is_continued(tiny_backend):
    text = tiny_backend._text([{"role": "user", "content": "rate"}, {"role": "assistant", "content": "Ratings:\nx: "}])
    assert text.endswith("Ratings:\nx: ")


def test_token_counts_count_a_shared_prefix_once(tiny_backend):
    """What the judge cost report reads: the KV-reuse path computes the head once and each candidate's middle
    once; the plain path computes every token it sends; generation counts what it generated."""
    import torch

    head = "A long shared rubric head that every judge prompt starts with. " * 6
    replies, dims = ("yes indeed, quite so", "no, never, not once"), ("empathy", "relevance", "persona")
    prompts = [f"{head}Reply: {reply}\nRatings:\n{dim}: " for reply in replies for dim in dims]
    encoded = [tiny_backend._token_ids(p) for p in prompts]
    sent = sum(len(e) for e in encoded)

    before = tiny_backend.token_counts.snapshot()
    tiny_backend.choice_distribution(prompts, SCORE_CHOICES)
    reuse = tiny_backend.token_counts.since(before)
    assert reuse.prompt_sent == sent and reuse.generated == 0
    # Recount by hand: the longest prefix all share, each reply's longest shared prefix, the rest of each prompt.
    def shared_len(seqs):
        return next(i for i in range(min(map(len, seqs))) if len({tuple(s[: i + 1]) for s in seqs}) > 1)
    head_len = shared_len(encoded)
    middles = [shared_len(encoded[i: i + 3]) for i in (0, 3)]
    expected = head_len + sum(m - head_len for m in middles) + sum(
        len(e) - middles[i // 3] for i, e in enumerate(encoded))
    assert reuse.prompt_computed == expected < sent / 2

    before = tiny_backend.token_counts.snapshot()
    ids = torch.tensor(tiny_backend.choice_token_ids(SCORE_CHOICES))
    tiny_backend._choice_distribution_plain(prompts, ids, SCORE_CHOICES)
    plain = tiny_backend.token_counts.since(before)
    assert plain.prompt_sent == plain.prompt_computed == sent

    before = tiny_backend.token_counts.snapshot()
    out = tiny_backend.sample([SampleRequest("Person: hello\nThe Anchor:", n=3, max_tokens=5, seed=1)])
    ran = tiny_backend.token_counts.since(before)
    prompt_len = out[0][0].prompt_tokens
    assert ran.generated == sum(c.completion_tokens for c in out[0]) > 0
    assert ran.prompt_sent == 3 * prompt_len and ran.prompt_computed == prompt_len - 1 + 3


def test_a_recorded_batch_seed_and_members_regenerate_the_text(tiny_backend):
    """In-process sampling is one stream per batch, so a candidate's request seed alone does not give its text
    back; the record says so (scope "batch") and names what does: the batch's seed and members, in order."""
    from mascot.llm.backend import SampleRequest

    reqs = [SampleRequest(f"Person: I feel low {i}\nThe Anchor:", n=2, max_tokens=6, seed=100 + i) for i in range(3)]
    first = tiny_backend.sample(reqs)
    scope = first[1][0].seed_scope
    assert scope["scope"] == "batch" and scope["batch_members"] == [100, 100, 101, 101, 102, 102]
    assert scope["batch_seed"] == 100 and scope["batch_index"] == 2
    again = tiny_backend.sample(reqs)  # the same members in the same order: the same texts
    assert [[c.text for c in g] for g in again] == [[c.text for c in g] for g in first]
    alone = tiny_backend.sample([reqs[1]])  # the request alone is another batch: another stream
    assert alone[0][0].seed_scope["batch_members"] == [101, 101] and alone[0][0].seed_scope["batch_seed"] == 101
    greedy = tiny_backend.sample([SampleRequest("Person: hi\nThe Anchor:", temperature=0.0, max_tokens=4)])
    assert greedy[0][0].seed_scope == {"scope": "greedy"}


def test_a_speaker_and_a_judge_on_one_model_share_one_copy(tiny_model_dir):
    from mascot.config import LLMEndpoint
    from mascot.llm.local_backend import LocalBackend

    speaker = LocalBackend(LLMEndpoint(model=str(tiny_model_dir), batch_size=64, dtype="float32"))
    judge = LocalBackend(LLMEndpoint(model=str(tiny_model_dir), batch_size=10, dtype="float32"))
    other = LocalBackend(LLMEndpoint(model=str(tiny_model_dir), batch_size=10, dtype="bfloat16"))
    assert speaker.model is judge.model and other.model is not speaker.model
    assert (speaker.batch_size, judge.batch_size) == (64, 10)  # each keeps its own settings


def test_the_nucleus_sampler_draws_what_transformers_temperature_and_top_p_draw():
    """mascot/llm/nucleus.py draws among the first k tokens where the nucleus fits in them, and over the whole
    vocabulary where it does not: the frequencies of its draws match transformers' TemperatureLogitsWarper +
    TopPLogitsWarper distribution, nothing outside the nucleus is ever drawn, and top_p 1 is the whole softmax."""
    import torch
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    from mascot.llm.nucleus import NucleusSampler

    torch.manual_seed(0)
    vocab = 3000
    peaked = torch.randn(1, vocab) * 6  # a nucleus of a few tokens: inside the first k
    flat = torch.randn(1, vocab) * 0.5  # a nucleus of thousands: past the first k, done over the whole row
    for scores, top_p in ((peaked, 0.9), (flat, 0.9), (peaked, 1.0)):
        expected = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(0.8)(None, scores.clone())).softmax(-1)[0]
        sampler = NucleusSampler(0.8, top_p, first_k=16)
        rows = scores.repeat(4000, 1)
        out = sampler(None, rows)
        assert torch.equal((out == 0).sum(-1), torch.ones(4000, dtype=torch.long))  # one finite token a row
        drawn = torch.bincount(out.argmax(-1), minlength=vocab).float() / 4000
        assert drawn[expected == 0].sum() == 0  # never outside the nucleus
        assert (drawn - expected).abs().max() < 0.03, (top_p, (drawn - expected).abs().max())
        if scores is flat and top_p < 1:
            assert (expected > 0).sum() > 16  # this case did go past the first k


def test_a_seeded_batch_samples_the_same_text_again(tiny_backend):
    """Generation draws through the nucleus sampler under the batch's own seed: the same request, the same text."""
    from mascot.llm.backend import SampleRequest

    requests = [SampleRequest("Person: hello\nThe Anchor:", n=3, temperature=0.9, top_p=0.95, max_tokens=8, seed=5)]
    first, again = tiny_backend.sample(requests), tiny_backend.sample(requests)
    assert [c.text for c in first[0]] == [c.text for c in again[0]]
