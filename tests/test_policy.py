import json

from mascot.config import GRPOParams, PolicyLoraParams
from mascot.policy.engine import train_policy
from mascot.policy.grpo import grpo_prompts
from mascot.policy.rewards import first_line, format_score, make_reward_model_reward


def test_format_reward():
    assert format_score(" I hear you, that sounds hard.\n", "The Anchor") == 1.0
    assert format_score("I hear you, that sounds hard.\nPerson: thanks", "The Anchor") == 0.5
    assert format_score("Person: I am the user now", "The Anchor") == 0.0
    assert format_score("ok", "The Anchor") == 0.0
    assert format_score("Well, The Anchor: says hello to you", "The Anchor") == 0.0


def test_format_reward_pays_no_reply_cut_at_its_budget():
    from mascot.policy.rewards import make_format_reward

    fmt = make_format_reward({7})  # 7: the stop token
    chat = [{"role": "assistant", "content": "I hear you, that sounds hard."}]
    kwargs = {"prompts": [None] * 4, "persona": ["The Anchor"] * 4}
    # ended with the stop token: paid; cut at the budget (last token not a stop token): 0, chat or transcript,
    # unless a transcript completion's first line (the reply) ended before the cut
    assert fmt(completions=[chat, chat, " I hear you, that sounds hard.", " I hear you, that sounds hard.\nPerson: w"],
               completion_ids=[[5, 6, 7], [5, 6, 6], [5, 6, 6], [5, 6, 6]], **kwargs) == [1.0, 0.0, 0.0, 0.5]
    assert first_line("  hello there\nmore") == "hello there"


class RecordingScorer:
    def __init__(self):
        self.items = []

    def score(self, items):
        self.items += items
        return [float(len(reply)) for _, _, reply in items]


def test_reward_model_reward_uses_columns_and_first_line(personas):
    scorer = RecordingScorer()
    fn = make_reward_model_reward(scorer, personas)
    ctx = json.dumps([{"role": "user", "content": "hi"}])
    out = fn(["p"], ["abc\nPerson: more"], persona=["The Beacon"], context=[ctx])
    assert out == [3.0]
    persona, context, reply = scorer.items[0]
    assert persona["name"] == "The Beacon" and context == [{"role": "user", "content": "hi"}] and reply == "abc"


def pairs_and_queries():
    queries = {f"q{i}": {"query_id": f"q{i}", "context": [{"role": "user", "content": f"help {i}"}]} for i in range(4)}
    pairs = [{"query_id": "q0", "persona": "The Anchor", "split": "eval"},
             {"query_id": "q0", "persona": "The Anchor", "split": "eval"},
             {"query_id": "q1", "persona": "The Beacon", "split": "train"},
             {"query_id": "q2", "persona": "Action Guide", "split": "eval"}]
    return queries, pairs


def test_grpo_prompts_are_eval_queries_once(personas):
    queries, pairs = pairs_and_queries()
    rows = grpo_prompts(queries, pairs, personas, GRPOParams())
    assert [(r["query_id"], r["persona"]) for r in rows] == [("q0", "The Anchor"), ("q2", "Action Guide")]
    assert rows[0]["prompt"].endswith("Person: help 0\nThe Anchor:")


def test_grpo_trains_lora_policy(tiny_model_dir, personas, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    import mlflow
    from safetensors.torch import load_file

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    queries, pairs = pairs_and_queries()
    params = GRPOParams(base_model=str(tiny_model_dir), num_generations=2, max_completion_length=6, max_steps=2,
                        learning_rate=1e-2, lora=PolicyLoraParams(r=4, alpha=8))
    rows = grpo_prompts(queries, pairs, personas, params)
    with mlflow.start_run():
        from mascot.policy.rewards import make_format_reward, make_reward_model_reward, stop_token_ids

        fmt = make_format_reward(stop_token_ids(str(tiny_model_dir)))
        result = train_policy(rows, [make_reward_model_reward(RecordingScorer(), personas), fmt],
                              [1.0, 0.5], params, tmp_path / "policy", tmp_path / "ckpt")
    assert len(result["history"]) == 2 and all("reward" in h for h in result["history"])
    weights = load_file(tmp_path / "policy/adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)  # B starts at zero: it moved


def test_sampling_inside_a_reward_function_leaves_grpos_own_stream_alone(tiny_model_dir, tiny_backend, personas,
                                                                         tmp_path, monkeypatch):
    """The Director's reward rolls the conversation forward with the in-process backend inside the trainer's
    step; that sampling must not reset the trainer's RNG, or the policy's next completions change."""
    import mlflow

    from mascot.llm.backend import SampleRequest

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    queries, pairs = pairs_and_queries()
    params = GRPOParams(base_model=str(tiny_model_dir), num_generations=2, prompts_per_step=2, max_completion_length=6,
                        max_steps=3, learning_rate=1e-2, lora=PolicyLoraParams(r=4, alpha=8))
    rows = grpo_prompts(queries, pairs, personas, params)

    def run(sample_in_reward: bool) -> list[str]:
        seen = []

        def spy(prompts, completions, **_):
            seen.extend(completions)
            return [float(len(c)) for c in completions]

        def sampler(prompts, completions, **_):
            if sample_in_reward:
                tiny_backend.sample([SampleRequest("Person: hi\nThe Anchor:", n=2, max_tokens=4, seed=99)])
            return [0.0] * len(completions)  # no signal: only its side effect could change the run

        with mlflow.start_run():
            train_policy(rows, [spy, sampler], [1.0, 1.0], params, tmp_path / f"p{sample_in_reward}",
                         tmp_path / f"c{sample_in_reward}")
        return seen

    quiet, sampling = run(False), run(True)
    assert len(quiet) == 3 * 4 and quiet == sampling  # 3 steps of 2 prompts x 2 completions


def test_counts_a_figure_reports_go_on_from_the_checkpoint_a_resumed_run_starts_at(tiny_model_dir, personas,
                                                                                   tmp_path, monkeypatch):
    """A count over the run (train_director's `completion_kinds`) held only the steps since a resume: a CPU
    default run resumed at step 4 of 8 reported 16 completions of 32. Counts handed to train_policy are saved
    beside each checkpoint and put back on resume, so a run cut at a checkpoint counts what an uncut one does."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    queries, pairs = pairs_and_queries()
    seen = []

    def run(max_steps: int) -> dict:
        params = GRPOParams(base_model=str(tiny_model_dir), num_generations=2, prompts_per_step=2,
                            max_completion_length=4, max_steps=max_steps, checkpoint_steps=2, learning_rate=1e-2,
                            lora=PolicyLoraParams(r=4, alpha=8))
        counts = {"completions": 0}  # a fresh process's counter

        def counting(prompts, completions, **_):
            counts["completions"] += len(completions)
            seen.extend(completions)
            return [float(len(c)) for c in completions]
        with mlflow.start_run():
            train_policy(grpo_prompts(queries, pairs, personas, params), [counting], [1.0], params,
                         tmp_path / "policy", tmp_path / "ckpt", counters={"kinds": counts})
        return counts

    first = run(2)  # stops at the checkpoint of step 2, as a killed run leaves it
    assert first == {"completions": 2 * 4} and (tmp_path / "ckpt/checkpoint-2/mascot_counters.json").exists()
    resumed = run(4)  # resumes at step 2 and runs steps 3 and 4
    assert len(seen) == 4 * 4
    assert resumed == {"completions": 4 * 4}  # not 2 * 4: the steps before the resume are counted too


def test_the_fused_head_projects_only_the_completion_on_the_cpu_with_the_same_logprobs(tiny_model_dir,
                                                                                        monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer import utils as trl_utils

    from mascot.policy.engine import head_on_completions_only

    # TRL's own switch for this test (a GRPO test before it may have patched it), put back after it
    monkeypatch.setattr(trl_utils, "_use_triton", getattr(trl_utils._use_triton, "__wrapped__", trl_utils._use_triton))
    rows_projected = []
    kernel = trl_utils._ChunkedLogProbFunction

    class Spy:
        @staticmethod
        def apply(hidden, *args):
            rows_projected.append(hidden.shape[0])
            return kernel.apply(hidden, *args)
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Spy)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(5, 100, (3, 20))
    labels = ids.clone()
    labels[:, :-4] = -100  # a 4-token completion after a 16-token prompt, as GRPO labels it

    def logprobs_and_grad():
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        out.log_probs.sum().backward()
        return out.log_probs.detach(), model.get_input_embeddings().weight.grad.clone()

    every_position = logprobs_and_grad()
    head_on_completions_only()
    head_on_completions_only()  # twice is once
    completions_only = logprobs_and_grad()
    assert rows_projected == [3 * 19, 3 * 4]  # shifted: 19 next-token positions a row, 4 of them labelled
    assert torch.allclose(every_position[0], completions_only[0], atol=1e-6)
    assert torch.allclose(every_position[1], completions_only[1], atol=1e-6)


def test_evaluate_differences_per_dimension_and_where_grpo_is_not_longer():
    from mascot.policy.evaluate import paired_differences

    def reply(policy, q, text, total, empathy):
        return {"candidate_id": f"q{q}|The Anchor|0", "text": text, "rm_score": total, "policy": policy,
                "judge": {"status": "scored", "total_reward": total, "scores": {"perceived_empathy": empathy}}}

    base = [reply("base", q, "one two three", 2.0, 2.0) for q in range(4)]
    # GRPO: longer and better on queries 0-1; as long and the same on 2-3
    grpo = [reply("grpo", q, "one two three four five" if q < 2 else "a b c", 4.0 if q < 2 else 2.0, 3.0)
            for q in range(4)]
    d = paired_differences(base, grpo, ("perceived_empathy",))
    assert d["judge_total"]["diff"] == 1.0 and d["judge_total"]["n"] == 4
    assert d["judge_perceived_empathy"]["diff"] == 1.0
    # the whole gain came with length: where the GRPO reply is not longer, none is left
    assert d["judge_total_not_longer"]["n"] == 2 and d["judge_total_not_longer"]["diff"] == 0.0
    assert d["reply_words"]["diff"] == 1.0
    # and at equal length: the regression on the word difference reads 0 where the lengths meet, 1 a word
    eq = d["judge_total"]["equal_length"]
    assert eq["mean"] == 0.0 and eq["slope"] == 1.0 and eq["n"] == 4 and eq["overlap"] == 0.5
    assert eq["matched"]["n"] == 2 and eq["matched"]["mean"] == 0.0
    assert "reply_words" not in d or "equal_length" not in d["reply_words"]


def test_a_judge_gain_that_is_length_is_called_length():
    from mascot.policy.evaluate import length_verdict

    up = {"diff": 0.3, "ci_low": 0.1, "ci_high": 0.5}
    assert length_verdict({**up, "equal_length": {"ci_low": 0.05, "extrapolated": False}}) == "gain"
    assert length_verdict({**up, "equal_length": {"ci_low": -0.1, "extrapolated": False}}) == "length"
    assert length_verdict({**up, "equal_length": {"ci_low": 0.05, "extrapolated": True}}) == "length"
    assert length_verdict({**up, "ci_low": -0.1, "equal_length": {"ci_low": 0.05}}) == "none"


def test_a_director_trained_under_the_directive_grammar_samples_only_directives_and_learns(tiny_model_dir, personas,
                                                                                          tmp_path, monkeypatch):
    """train_director.constrain_rollouts: a random model never writes a directive freely; under the grammar every
    rollout parses and names a team member, so a reward on the directive reaches the adapter."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    import mlflow
    from safetensors.torch import load_file

    from mascot.annotate.director import directive_pattern, directive_text, parse_directive

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    names = list(personas)
    seen = []

    def longer_action(prompts, completions, **_):
        seen.extend(completions)
        return [len(parse_directive(directive_text(c), names).action) / 60 for c in completions]

    # a directive of at most 60 + 20 characters: the tiny tokenizer spends up to a token a character on them
    rows = [{"prompt": f"Conversation {k}: the person feels low.\nAgent:"} for k in range(4)]
    params = GRPOParams(base_model=str(tiny_model_dir), num_generations=4, max_completion_length=96, max_steps=2,
                        learning_rate=1e-2, lora=PolicyLoraParams(r=4, alpha=8))
    with mlflow.start_run():
        train_policy(rows, [longer_action], [1.0], params, tmp_path / "policy", tmp_path / "ckpt",
                     completion_regex=directive_pattern(names, after_agent_label=True))
    assert len(seen) == 8  # every completion parsed (parse_directive raises otherwise) and named one of the team
    weights = load_file(tmp_path / "policy/adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)


def test_stratified_choices_give_each_group_every_agent_in_turn():
    from mascot.policy.rollout_grammar import stratified_choices

    # 2 groups of 8 rows over 4 agents: each agent twice a group, whatever the group's offset
    picks = stratified_choices(16, 8, 4, offset=lambda group: 3 * group)
    assert [sorted(picks[g * 8:(g + 1) * 8]) for g in range(2)] == [[0, 0, 1, 1, 2, 2, 3, 3]] * 2
    # groups of 2 over 4 agents: the offsets cover them over the groups
    assert stratified_choices(4, 2, 4, offset=lambda group: 2 * group) == [0, 1, 2, 3]
    # a process's rows start inside the batch: row 6 is the third of group 1 (groups of 4)
    assert stratified_choices(2, 4, 4, first_row=6) == [2, 3]


def test_a_director_exploring_stratified_names_every_agent_in_each_group_and_the_watch_samples_freely(
        tiny_model_dir, personas, tmp_path, monkeypatch):
    """train_director.explore_choices: stratified. A random model's choice is near fixed (the issue's embedded Director
    drew Action Guide on whole groups, advantage 0): under per-row grammars each group of 4 rollouts names the 4
    agents once, so each gets the advantage of its block; generate outside TRL's rollouts keeps the one grammar."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    import torch

    from mascot.annotate.director import directive_pattern, directive_text, parse_directive
    from mascot.policy.engine import build_trainer

    names = list(personas)
    groups = []

    def pays_the_beacon(prompts, completions, **_):
        agents = [parse_directive(directive_text(c), names).agent for c in completions]
        groups.extend(agents[i:i + 4] for i in range(0, len(agents), 4))
        return [1.0 if a == "The Beacon" else 0.0 for a in agents]

    rows = [{"prompt": f"Conversation {k}: the person feels low.\nAgent:"} for k in range(4)]
    params = GRPOParams(base_model=str(tiny_model_dir), num_generations=4, max_completion_length=96, max_steps=2,
                        learning_rate=1e-2, lora=PolicyLoraParams(r=4, alpha=8))
    trainer, tokenizer = build_trainer(rows, [pays_the_beacon], [1.0], params, tmp_path / "ckpt", report_to=(),
                                       completion_regex=directive_pattern(names, after_agent_label=True),
                                       rollout_regexes=[directive_pattern([a], after_agent_label=True) for a in names])
    trainer.train()
    assert len(groups) == 2 and all(sorted(g) == sorted(names) for g in groups)
    # outside the rollouts (the watch, the choice probe): three rows, one grammar, the choice the model's own
    state = dict(trainer.choice_exploration)
    batch = tokenizer(["Conversation: I lost my job.\nAgent:"] * 3, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = trainer.model.generate(**batch, max_new_tokens=96, do_sample=True)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert all(parse_directive(directive_text(t), names).agent in names for t in texts)
    assert trainer.choice_exploration["calls"] == state["calls"]


def test_stratified_exploration_needs_the_grammar():
    import pytest
    from pydantic import ValidationError

    from mascot.config import DirectorParams

    with pytest.raises(ValidationError, match="constrain_rollouts"):
        DirectorParams(explore_choices="stratified")
    with pytest.raises(ValidationError, match="use_vllm"):
        DirectorParams(explore_choices="stratified", constrain_rollouts=True, trainer_args={"use_vllm": True})
    assert DirectorParams(explore_choices="stratified", constrain_rollouts=True).explore_choices == "stratified"
