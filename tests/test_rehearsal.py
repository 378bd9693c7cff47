"""The real road, rehearsed in CI: `mascot profile real rehearsal`, all 20 stages with `dvc repro`, every LLM
request to a real vLLM CPU server (`mascot serve`'s VLLMServer) serving the tiny chat-template model.

The only overlay on the rehearsal profile is the model's location (the tiny random Qwen3 with a ChatML template
instead of the 0.5B) and the bars a random-weight judge can pass. judge_check runs both judge modes (json and
expected) through the chat template and the same scoring code the score stages use.
"""
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.conftest import log_offset, ran_stages, sh

pytestmark = pytest.mark.integration
ALL_STAGES = {"base_model", "small_model", "prepare", "human_set", "generate", "judge_check", "score", "pairs", "validate",
              "train_rm", "promote", "train_grpo", "evaluate", "episodes", "judge_check_group", "score_group", "pairs_group",
              "validate_group", "train_group_rm", "promote_group", "train_director", "evaluate_group"}
RECORDS = ["data/candidates.jsonl", "data/scores.jsonl", "data/group/episodes.jsonl", "data/group/scores.jsonl",
           "reports/evaluate_replies.jsonl", "reports/evaluate_group_conversations.jsonl",
           "data/judge_check/scores.jsonl", "data/judge_check_group/scores.jsonl"]


@pytest.fixture(scope="module")
def rehearsal(repo_root, tmp_path_factory, tiny_model_dir, vllm_server):
    from benchmarks.pipeline_copy import fresh_pipeline_copy

    work = tmp_path_factory.mktemp("rehearsal") / "repo"
    env = fresh_pipeline_copy(repo_root, work, MASCOT_REQUEST_LOG=str(work / ".mascot/requests.jsonl"))
    url = vllm_server.base_url
    # the session's server (tests/conftest.py) serves the tiny model as "models/base", the name the rehearsal's
    # profile gives the speaker and the judge; base_model copies that same model into models/base, which the
    # reward models, GRPO and the Director train on
    overlay = {"base_model": {"source": "path", "path": str(tiny_model_dir)},
               "llm": {"speaker": {"base_url": url}, "judge": {"base_url": url}},
               # a random-weight judge is at chance and its json scores are often constant: the gates' code
               # runs, at bars it can pass
               "validate": {"min_judge_accuracy": 0.0, "max_constant_group_fraction": 1.0, "min_scored_fraction": 0.0},
               "validate_group": {"min_judge_accuracy": 0.0},
               "pairs": {"score_margin": 0.0}, "group_pairs": {"score_margin": 0.0}}
    (work / "profiles/ci-tiny.yaml").write_text(yaml.safe_dump(overlay))
    print(sh("mascot profile real rehearsal ci-tiny", work, env))
    log = Path(vllm_server.cfg.log_path)
    start = log_offset(vllm_server)
    try:
        out = sh("dvc repro", work, env)
        again = sh("dvc repro", work, env)
    except AssertionError:
        print(log.read_text()[-4000:] if log.exists() else "no server log")
        raise
    with log.open("rb") as fh:  # what the server logged while this chain ran
        fh.seek(start)
        server_log = fh.read().decode("utf-8", errors="replace")
    return work, env, out, again, server_log


def test_every_stage_runs_through_the_server(rehearsal):
    work, env, out, again, _ = rehearsal
    assert ran_stages(out) == ALL_STAGES
    assert ran_stages(again) == set(), again
    params = yaml.safe_load((work / "params.yaml").read_text())
    assert {params["llm"][k]["backend"] for k in ("speaker", "judge")} == {"openai"}
    assert params["generate"]["prompt_style"] == params["grpo"]["prompt_style"] == "chat"
    assert params["train_director"]["prompt_style"] == "chat" and params["episodes"]["user_turns"] is True
    report = json.loads((work / "reports/validation.json").read_text())
    assert report["success"] and report["failed"] == 0
    # every figure is in the stages' reports; `dvc metrics show` lists their headline numbers (mascot/headline.py)
    figures = "".join(p.read_text() for p in sorted((work / "reports/figures").glob("*.json")))
    for key in ("queries", "candidates", "scored", "pairs", "ref_gt_off_topic", "eval_length_baseline_accuracy",
                "grpo_minus_base", "valid_branches", "collective_total", "directive_format_last_step",
                "directive_parse_rate_unconstrained", "human_pairs", "human_pairs_conversations"):
        assert f'"{key}"' in figures, key
    metrics = sh("dvc metrics show --json", work, env)
    for key in ("queries", "candidates", "rm_longer_wins", "rm_human_acc", "grpo_gain", "grpo_gain_equal_len",
                "valid_branches", "human_pairs"):
        assert f'"{key}"' in metrics, key
    declared = [next(iter(m)) if isinstance(m, dict) else m
                for stage in yaml.safe_load((work / "dvc.yaml").read_text())["stages"].values()
                for m in stage.get("metrics", [])]
    assert len(declared) >= 17
    for rel in declared:  # every stage's metrics file, written and non-empty
        assert json.loads((work / rel).read_text()), rel


def test_every_request_went_to_the_server_counted_per_endpoint(rehearsal):
    work, _, _, _, server_log = rehearsal
    entries = [json.loads(line) for line in (work / ".mascot/requests.jsonl").read_text().splitlines()]
    backends = [b for e in entries for b in e["backends"]]
    assert {b["backend"] for b in backends} == {"openai"}, "an LLM backend ran in-process"
    client = Counter()
    by_stage = {}
    for e in entries:
        for b in e["backends"]:
            client.update(b["requests"])
            by_stage.setdefault(e["stage"], Counter()).update(b["requests"])
    server = Counter(re.findall(r'"POST (/v1/(?:chat/)?completions) HTTP', server_log))
    print("\nREQUESTS per stage and endpoint:")
    for stage, counts in by_stage.items():
        print(f"  {stage:<16} {dict(counts)}")
    print(f"  client total     {dict(client)}\n  server log total {dict(server)}")
    assert set(by_stage) >= {"generate", "judge_check", "score", "evaluate", "episodes", "score_group",
                             "train_director", "evaluate_group"}
    assert client["/v1/chat/completions"] > 0 and client == server  # every request the stages sent, the server got


def test_the_director_trained_on_conversational_completions_and_directives_parse(rehearsal):
    work, *_ = rehearsal
    director = json.loads((work / "reports/figures/train_director.json").read_text())
    assert director["completion_kinds"]["conversational"] > 0 and director["completion_kinds"]["plain"] == 0
    episodes = json.loads((work / "reports/figures/episodes.json").read_text())
    print("\nEPISODES:", {k: episodes[k] for k in ("valid_branches", "invalid_branches", "directive_parse_rate",
                                                  "directive_parse_rate_unconstrained", "directives_constrained")})
    # a random-weight Director under the grammar: every directive parses and names a real agent
    assert episodes["directives_constrained"] and episodes["directive_parse_rate"] == 1.0
    assert episodes["valid_branches"] == episodes["episodes"] == episodes["prefixes"] * 3 > 0


def test_registry_aliases_lineage_and_no_thinking_in_any_record(rehearsal):
    work, env, *_ = rehearsal
    check = r"""
import json
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import setup_tracking
setup_tracking(load_params())
c = MlflowClient()
out = {}
for name in ("mascot-persona-rm", "mascot-group-rm"):
    v = c.get_model_version_by_alias(name, "champion")
    out[name] = {"version": str(v.version), "tags": v.tags}
for name in ("mascot-speaker", "mascot-director"):
    v = c.search_model_versions(f"name='{name}'")[0]
    out[name] = {"version": str(v.version), "tags": v.tags, "run_tags": c.get_run(v.run_id).data.tags}
open(".mascot/check.json", "w").write(json.dumps(out))
"""
    (work / ".mascot/check.py").write_text(check)
    sh("python .mascot/check.py", work, env)
    out = json.loads((work / ".mascot/check.json").read_text())
    lock = (work / "dvc.lock").read_text()
    assert out["mascot-persona-rm"]["version"] == out["mascot-group-rm"]["version"] == "1"
    assert out["mascot-persona-rm"]["tags"]["pairs_md5"] in lock and "champion_reason" in out["mascot-persona-rm"]["tags"]
    assert out["mascot-persona-rm"]["tags"]["base_model_source"] == "path"  # the session server's tiny model
    assert out["mascot-speaker"]["tags"]["reward_model_uri"] == "models:/mascot-persona-rm@champion"
    assert out["mascot-director"]["tags"]["reward_model_uri"] == "models:/mascot-group-rm@champion"
    for rel in RECORDS:
        text = (work / rel).read_text()
        assert text.strip(), rel
        assert "<think>" not in text and "</think>" not in text, rel
    judge = json.loads((work / "reports/figures/judge_check.json").read_text())
    print("\nJUDGE_CHECK:", json.dumps(judge)[:1500])
