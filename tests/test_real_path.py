"""The real profile's own code paths, on tiny models: the chat Director under GRPO, trainer_args, the hub stage,
profiles that compose."""
import json

import pytest

from mascot.annotate.episodes import Sampling

CHAT_DIRECTIVE = [{"role": "assistant", "content": "Agent: The Anchor\nAction: Validate the feeling.\nTone: warm"}]
CHAT_UNKNOWN = [{"role": "assistant", "content": "Agent: The Ability\nAction: x\nTone: y"}]
CHAT_PARTIAL = [{"role": "assistant", "content": "Agent: Action Guide\nAction: One small step."}]


class LengthScorer:
    def score(self, items):
        return [float(sum(len(m["content"]) for m in block)) for _, _, block in items]


def test_director_rewards_read_conversational_completions(tiny_backend, personas):
    """TRL hands a reward function the completions of a conversational prompt as message lists."""
    from mascot.config import DirectorParams
    from mascot.policy.director import make_director_rewards

    rm, fmt, div = make_director_rewards(LengthScorer(), tiny_backend, personas,
                                         DirectorParams(rollout_turns=1, prompt_style="chat"), Sampling(max_tokens=4))
    completions = [CHAT_DIRECTIVE, CHAT_UNKNOWN, CHAT_PARTIAL]
    cols = dict(query_id=["q"] * 3, context=[json.dumps([{"role": "user", "content": "hi"}])] * 3,
                turns=[json.dumps([])] * 3, previous_speaker=["The Anchor", "", ""])
    assert fmt(None, completions) == [1.0, 0.0, 0.0]
    assert div(None, completions, **cols) == [-1.0, 0.0, 0.0]
    rewards = rm(None, completions, **cols)
    assert rewards[1] == rewards[2] == rewards[0] - 1.0


def test_chat_director_prompts_leave_the_whole_directive_to_the_policy(personas):
    """TRL renders a conversational prompt with a generation prompt, so an "Agent:" prefill would be closed as a
    message of its own: the chat Director's training prompt ends in the user's turn."""
    from mascot.config import DirectorParams
    from mascot.policy.director import director_states

    episodes = [{"episode_id": "p|b0", "query_id": "p", "prefix_id": "p", "valid": True,
                 "turns": [{"role": "agent", "speaker": "The Anchor", "text": "I hear you."}]}]
    queries = {"p": {"query_id": "p", "context": [{"role": "user", "content": "I feel low."}]}}
    rows = director_states(episodes, queries, personas, DirectorParams(prompt_style="chat"))
    assert all(r["prompt"][-1]["role"] == "user" for r in rows)


def test_grpo_trains_a_chat_director_on_conversational_completions(tiny_model_dir, tiny_backend, personas, tmp_path,
                                                                   monkeypatch):
    """The real profile's train_director: chat prompts, so TRL passes message lists to every reward function."""
    import mlflow
    from safetensors.torch import load_file

    from mascot.config import DirectorParams, PolicyLoraParams
    from mascot.policy.director import director_states, make_director_rewards
    from mascot.policy.engine import train_policy

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    params = DirectorParams(base_model=str(tiny_model_dir), prompt_style="chat", num_generations=2,
                            max_completion_length=8, max_steps=2, learning_rate=1e-2, rollout_max_tokens=4,
                            lora=PolicyLoraParams(r=4, alpha=8))
    episodes = [{"episode_id": f"{q}|b0", "query_id": q, "prefix_id": q, "valid": True, "turns": []}
                for q in ("p1", "p2")]
    queries = {q: {"query_id": q, "context": [{"role": "user", "content": f"I feel low {q}."}]} for q in ("p1", "p2")}
    rows = director_states(episodes, queries, personas, params)
    seen = []
    funcs = make_director_rewards(LengthScorer(), tiny_backend, personas, params, Sampling(max_tokens=4))

    def spy(prompts, completions, **kw):  # a random model's directives never parse: this gives the group a spread
        seen.extend(completions)
        return [float(len(c[0]["content"])) for c in completions]
    with mlflow.start_run():
        result = train_policy(rows, [*funcs, spy], [1.0, 1.0, 0.2, 1.0], params, tmp_path / "director", tmp_path / "ck")
    assert len(result["history"]) == 2
    assert seen and all(isinstance(c, list) and c[0]["role"] == "assistant" for c in seen)
    assert funcs[1].completion_kinds == {"conversational": len(seen), "plain": 0}
    weights = load_file(tmp_path / "director/adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)


@pytest.mark.parametrize("style,prefill", [("chat", True), ("chat", False), ("transcript", True)])
def test_a_constrained_director_parses_by_construction(tiny_backend, personas, style, prefill):
    """A random-weight model writes no directive freely; under the directive grammar every one parses and
    names a known agent."""
    from mascot.annotate.director import parse_directive
    from mascot.annotate.episodes import Branch, LLMDirector, parse_rate

    prefixes = [Branch(f"q{i}", -1, [{"role": "user", "content": f"I can't sleep {i}."}]) for i in range(3)]
    sampling = Sampling(temperature=1.0, max_tokens=96, seed=3)  # the real profile's budget
    free = LLMDirector(tiny_backend, personas, style, sampling, prefill=prefill).propose(prefixes, n=2)
    assert parse_rate([r for g in free for r in g], list(personas))["parse_rate"] == 0.0
    bound = LLMDirector(tiny_backend, personas, style, sampling, constrained=True, prefill=prefill).propose(prefixes, n=2)
    directives = [parse_directive(r, list(personas)) for g in bound for r in g]
    assert len(directives) == 6 and all(d.agent in personas and d.action and d.tone for d in directives)


from tests.stand_in import stand_in_hub  # noqa: E402,F401  (a fixture)


def run_stage(stage: str, cwd, params: dict, **env):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    (Path(cwd) / "params.yaml").write_text(yaml.safe_dump(params))
    # the stage's files as dvc.yaml hands them (mascot/stage_args.py)
    (Path(cwd) / "dvc.yaml").write_text((Path(__file__).resolve().parents[1] / "dvc.yaml").read_text())
    full_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env}
    return subprocess.run(["mascot", stage], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=300)


def hub_params(repo_root, revision):
    import yaml

    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["base_model"] = {"source": "hub", "repo": "org/tiny-chat", "revision": revision, "out_dir": "models/base"}
    return raw


def test_hub_source_downloads_once_at_the_pinned_commit(stand_in_hub, repo_root, tmp_path):
    hub, url = stand_in_hub
    env = dict(HF_ENDPOINT=url, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"))
    proc = run_stage("base_model", tmp_path, hub_params(repo_root, "v1.0"), **env)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    source = json.loads((tmp_path / "models/base/mascot_source.json").read_text())
    metrics = json.loads((tmp_path / "reports/figures/base_model.json").read_text())
    assert source["commit"] == metrics["commit"] == hub.commit and source["revision"] == "v1.0"
    assert (tmp_path / "models/base/model.safetensors").exists() and not (tmp_path / "models/base/.cache").exists()
    assert f"at commit {hub.commit}" in proc.stdout
    # every file was fetched at the resolved commit, never at the moving tag
    assert all(f"/resolve/{hub.commit}/" in path for method, path in hub.requests if "/resolve/" in path)
    from mascot.registry import base_model_tags

    assert base_model_tags(tmp_path / "models/base")["base_model_commit"] == hub.commit  # what training runs tag


def test_hub_source_refuses_a_missing_revision(stand_in_hub, repo_root, tmp_path):
    hub, url = stand_in_hub
    proc = run_stage("base_model", tmp_path, hub_params(repo_root, "v9.9"), HF_ENDPOINT=url, HF_HUB_OFFLINE="0",
                     HF_HOME=str(tmp_path / "hf"))
    print(proc.stderr)
    assert proc.returncode == 2
    assert "base_model.revision: 'v9.9' is not a revision of org/tiny-chat" in proc.stderr
    assert not (tmp_path / "models/base").exists()
    unpinned = hub_params(repo_root, None)
    del unpinned["base_model"]["revision"]
    proc = run_stage("base_model", tmp_path, unpinned)
    assert proc.returncode == 2 and "source 'hub' needs repo and revision" in proc.stderr, proc.stderr


@pytest.mark.parametrize("offline", ["1", "0"])
def test_an_unreachable_hub_is_one_line_that_says_what_to_do(repo_root, tmp_path, offline):
    import socket

    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc = run_stage("base_model", tmp_path, hub_params(repo_root, "v1.0"), HF_ENDPOINT=dead, HF_HUB_OFFLINE=offline,
                     HF_HOME=str(tmp_path / "hf"))
    print(proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("mascot base_model: error: base_model: cannot download org/tiny-chat@v1.0")
    assert ("unset it" if offline == "1" else "set HF_ENDPOINT") in lines[0] and "{source: path" in lines[0]


def test_trainer_args_reach_trls_configs(tmp_path):
    from mascot.config import GRPOParams, TrainRMParams
    from mascot.policy.engine import grpo_config
    from mascot.trainer_args import build_config

    rm = TrainRMParams(trainer_args={"warmup_steps": 3, "lr_scheduler_type": "constant", "max_grad_norm": 0.5})
    config = build_config("reward", {"output_dir": str(tmp_path), "use_cpu": True, "bf16": False}, rm.trainer_args)
    assert (config.warmup_steps, config.lr_scheduler_type.value, config.max_grad_norm) == (3, "constant", 0.5)
    grpo = GRPOParams(trainer_args={"num_iterations": 2, "epsilon": 0.3, "loss_type": "grpo"})
    config = grpo_config(grpo, tmp_path, 8, [1.0, 0.5], on_gpu=False)
    assert (config.num_iterations, config.epsilon, config.loss_type) == (2, 0.3, "grpo")
    assert config.num_generations == grpo.num_generations and config.per_device_train_batch_size == 8  # ours kept


def test_unknown_or_owned_trainer_args_are_refused_with_their_names(repo_root):
    import yaml

    from mascot.config import ConfigError, parse_params

    raw = yaml.safe_load((repo_root / "params.yaml").read_text())
    raw["train_rm"]["trainer_args"] = {"bf16x": True, "learning_rate": 1e-4}
    raw["train_director"]["trainer_args"] = {"use_vllmm": True}
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    message = str(err.value)
    print(message)
    assert "train_rm.trainer_args" in message and "'bf16x' is not a field of TRL's RewardConfig (did you mean 'bf16'?)" in message
    assert "'learning_rate' has its own key in this block: set learning_rate" in message
    assert "train_director.trainer_args" in message and "did you mean 'use_vllm'?" in message


def test_keep_layers_keeps_the_first_layers_weights_and_refuses_a_depth_the_model_lacks(tiny_model_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file
    import torch
    from transformers import AutoConfig

    from mascot.llm.base_model import HubError, keep_first_layers

    shallow = tmp_path / "shallow"
    shutil.copytree(tiny_model_dir, shallow)
    assert keep_first_layers(shallow, 1, "small_model") == 2
    config = AutoConfig.from_pretrained(shallow)
    assert config.num_hidden_layers == 1 and len(config.layer_types) == 1
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(shallow / "model.safetensors")
    assert not any(".layers.1." in k for k in after)
    kept = [k for k in before if ".layers.1." not in k]
    assert sorted(after) == sorted(kept)
    assert all(torch.equal(before[k], after[k]) for k in kept)  # the first layer, the embeddings, the norm as they were
    with pytest.raises(HubError, match=r"small_model.keep_layers: 1, but the model has 1 layers"):
        keep_first_layers(shallow, 1, "small_model")
