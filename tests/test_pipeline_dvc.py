"""End to end in a real DVC repository: the whole chain on tiny models, then what reruns when."""
import re

import pytest

pytestmark = pytest.mark.integration


from tests.conftest import FIRST_REPRO_LOGS, ran_stages, sh

ALL_STAGES = {"base_model", "small_model", "prepare", "human_set", "generate", "judge_check", "score", "pairs",
              "validate", "train_rm", "promote", "train_grpo", "evaluate", "episodes", "judge_check_group", "score_group",
              "pairs_group", "validate_group", "train_group_rm", "promote_group", "train_director", "evaluate_group"}


def _json_of(text: str) -> dict:
    """The indented JSON object a command printed after its log lines."""
    import json

    return json.loads(text[text.index("{\n"): text.rindex("}") + 1])

def test_repro_runs_every_stage_then_nothing(dvc_repo):
    import json

    work, env = dvc_repo
    # the fixture's two runs: the order tests run in (test_queue, test_stack first) cannot change what they saw
    first, second = ((work / log).read_text() for log in FIRST_REPRO_LOGS)
    assert ran_stages(first) == ALL_STAGES
    report = json.loads((work / "reports/validation.json").read_text())
    assert report["success"] and report["failed"] == 0
    # what dvc metrics show lists: each stage's headline numbers (mascot/headline.py), a few dozen in all; every
    # figure, with its strings and detail, in reports/figures/<stage>.json
    out = sh("dvc metrics show --json", work, env)
    shown = json.loads(out[out.index("{"): out.rindex("}") + 1])
    headline = {f"{path}:{key}": value for rev in shown.values() for path, data in rev["data"].items()
                for key, value in data["data"].items()}
    print(json.dumps(headline, indent=1))
    assert 30 <= len(headline) <= 60 and all(isinstance(v, (int, float)) for v in headline.values()), headline
    for stage in ALL_STAGES:
        assert any(k.startswith(f"metrics/{stage}.json:") for k in headline), stage
    for key in ("queries", "candidates", "scored", "unscored", "pairs", "mean_perceived_empathy",
                "chosen_longer_fraction", "ref_gt_off_topic", "ref_gt_off_topic_ci_low", "chosen_prompt_style",
                "eval_length_baseline_accuracy", "reference_ref_gt_off_topic", "grpo_minus_base",
                "valid_branches", "invalid_branches", "mean_fidelity", "std_group_coherence", "collective_total",
                "per_reply_total", "speaker_usage", "minus_random_collective_total", "trained_minus_base_collective_total",
                "directive_format_last_step"):
        assert any(f'"{key}"' in (work / f"reports/figures/{stage}.json").read_text() for stage in ALL_STAGES), key
    by_source = json.loads((work / "reports/figures/prepare.json").read_text())["queries_by_source"]
    assert set(by_source) == {"esconv", "qmsum"}, by_source  # the default corpus is the method's two
    pairs = [json.loads(line) for line in (work / "data/pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["score_chosen"] > p["score_rejected"] for p in pairs)
    # against people, end to end: the shipped slices' rated turns, the judge and the reward model measured on
    # them, and (the tiny profile's pairs.human) the seekers' pairs of train conversations trained on
    human = json.loads((work / "reports/figures/human_set.json").read_text())
    assert human["items"] == 535 and human["pairs"] == 292 and human["pair_conversations"] == 53
    judge = json.loads((work / "reports/figures/judge_check.json").read_text())
    assert judge["human_items"] > 0 and judge["human_pairs_n"] > 0 and judge["chosen_by"] == "human_pairs"
    assert {p["pair_source"] for p in pairs} == {"judge", "human"}
    assert all(p["split"] == "train" for p in pairs if p["pair_source"] == "human")
    rm = json.loads((work / "reports/figures/train_rm.json").read_text())
    assert rm["human_pairs_n"] > 0 and rm["human_length_baseline"] is not None
    promoted = json.loads((work / "reports/figures/promote.json").read_text())
    assert "untrained pairs of" in promoted["reason"] and promoted["new_human_pairs_n"] == rm["human_pairs_n"]

    assert ran_stages(second) == set(), second


def _flipped(value):
    """Another value of the same kind: what a user's edit of that parameter looks like to DVC."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, list):
        return [*value, "flipped"]
    if isinstance(value, dict):
        return {**value, "flipped": 1}
    return f"{value}-flipped"


def test_dvc_yaml_declares_every_parameter_and_file_each_stage_reads(dvc_repo):
    """What each stage read while the chain ran (mascot/reads.py) against dvc.yaml; then every parameter any stage
    read is changed at once, and `dvc status` must find each stage stale by exactly the parameters it read."""
    import json

    from ruamel.yaml import YAML

    from mascot import param_deps, reads

    work, env = dvc_repo
    sh("dvc repro", work, env)
    records = reads.load(work / ".mascot" / "reads")
    assert set(records) == ALL_STAGES, sorted(ALL_STAGES - set(records))
    found = param_deps.check(records, work / "dvc.yaml")
    # a key read and not listed leaves the stage stale without a word: that fails. A key listed and not read in this
    # run is said, not failed: another run's branch may read it (the lists are the union of the records written)
    print("listed, not read in this run:", {stage: f["unread_params"] for stage, f in found.items() if f["unread_params"]})
    wrong = {stage: {k: v for k, v in f.items() if v and k != "unread_params"} for stage, f in found.items()}
    wrong = {stage: f for stage, f in wrong.items() if f}
    assert not wrong, ("dvc.yaml misses what the stages read (`python -m mascot.param_deps DIR --write` with DIR a "
                       f"record of the chain):\n{json.dumps(wrong, indent=1)}")
    read = {stage: param_deps.stage_units(stage, rec["params"]) for stage, rec in records.items()}
    ry = YAML()
    original = (work / "params.yaml").read_text()
    doc = ry.load(original)
    for key in set().union(*read.values()):
        *parents, last = key.split(".")
        block = doc
        for part in parents:
            block = block[part]
        block[last] = _flipped(block[last])
    try:
        with open(work / "params.yaml", "w") as fh:
            ry.dump(doc, fh)
        out = sh("dvc status --json", work, env)
        status = json.loads(out[out.index("{"): out.rindex("}") + 1])
    finally:
        (work / "params.yaml").write_text(original)
    stale = {stage: {k for change in changes if isinstance(change, dict)
                     for k in (change.get("changed deps") or {}).get("params.yaml", {})}
             for stage, changes in status.items()}
    print("\n".join(f"{stage}: stale by {sorted(keys)}" for stage, keys in sorted(stale.items())))
    listed = {stage: set(param_deps.listed_params(found_stage))
              for stage, found_stage in YAML(typ="safe").load((work / "dvc.yaml").read_text())["stages"].items()}
    # every stage is stale by exactly what dvc.yaml lists for it, and that covers everything it read
    assert {s: k for s, k in stale.items() if k} == {s: k for s, k in listed.items() if k}
    not_stale = {s: sorted(u for u in units if not any(param_deps.covers(k, u) for k in stale.get(s, ())))
                 for s, units in read.items()}
    assert not any(not_stale.values()), not_stale


def test_registry_lineage_and_fresh_process_round_trip(dvc_repo):
    import json

    work, env = dvc_repo
    sh("dvc repro", work, env)
    check = r"""
import json, mlflow
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.data.personas import load_personas
from mascot.registry import setup_tracking
from mascot.reward.scorer import RewardScorer
from mascot.reward.train import probe_items
params = load_params()
setup_tracking(params)
client = MlflowClient()
champion = client.get_model_version_by_alias("mascot-persona-rm", "champion")
scores = RewardScorer.from_registry("models:/mascot-persona-rm@champion").score(probe_items(load_personas("data/personas.yaml")))
grpo = client.search_model_versions("name='mascot-speaker'")[0]
run = client.get_run(grpo.run_id)
open(".mascot/check_registry.json", "w").write(json.dumps({"champion": str(champion.version), "tags": champion.tags, "scores": scores,
                  "grpo_rm_version": run.data.params["reward_model_version"],
                  "grpo_rm_tag": run.data.tags["reward_model_uri"],
                  "reward_history": [m.value for m in client.get_metric_history(grpo.run_id, "reward")],
                  "rm_inputs": [(d.dataset.name, d.dataset.digest, [t.value for t in d.tags])
                                for d in client.get_run(champion.run_id).inputs.dataset_inputs],
                  "watch_judge_steps": [m.step for m in client.get_metric_history(grpo.run_id, "watch/judge")],
                  "grpo_version_tags": grpo.tags,
                  "grpo_aliases": list(client.get_model_version(grpo.name, grpo.version).aliases),
                  "watch_table": client.load_table(run.info.experiment_id, "watch_completions.json",
                                                   run_ids=[grpo.run_id]).to_dict("list"),
                  "eval_tables": {r.data.tags["policy"]: client.load_table(r.info.experiment_id, "evaluate_completions.json",
                                                                           run_ids=[r.info.run_id]).to_dict("list")
                                  for r in client.search_runs([client.get_experiment_by_name("mascot-speaker").experiment_id],
                                                              "tags.evaluation = 'true'")}}, default=str))
"""
    (work / ".mascot").mkdir(exist_ok=True)
    (work / ".mascot/check_registry.py").write_text(check)
    sh("python .mascot/check_registry.py", work, env)
    out = json.loads((work / ".mascot/check_registry.json").read_text())
    registered = json.loads((work / "models/reward/registered.json").read_text())
    assert out["champion"] == registered["version"] == "1"
    # a fresh process, from the registry: the training process's scores (float32 rounding at most)
    assert max(abs(a - b) for a, b in zip(out["scores"], registered["probe_scores"])) < 1e-6
    tags = out["tags"]
    assert tags["pairs_md5"] and tags["reward_template_hash"] and tags["git_commit"] and "champion_reason" in tags
    lock = (work / "dvc.lock").read_text()
    assert tags["pairs_md5"] in lock  # the DVC hash of the pairs the model was trained on
    assert out["grpo_rm_version"] == "1" and out["grpo_rm_tag"] == "models:/mascot-persona-rm@champion"
    assert len(out["reward_history"]) == 2
    # the runs page's Dataset column: the pairs the reward model trained on, digest = dvc.lock's md5
    assert ["data/pairs.jsonl", tags["pairs_md5"], ["train"]] in out["rm_inputs"]
    # the watch: a check at step 0, each step (tiny: every_steps 1) and the verdict on the version
    assert out["watch_judge_steps"] == [0, 1, 2] and out["grpo_version_tags"]["watch_verdict"]
    watch = json.loads((work / "reports/figures/train_grpo.json").read_text())
    assert watch["watch_verdict"] == "too few to tell" and watch["watch_n"] == 2  # 2 probes: no verdict
    assert out["grpo_aliases"] == ["champion"] and watch["champion"] is True
    assert (work / "plots/train_grpo/watch.csv").read_text().startswith("step,mean_reward_model,mean_judge")
    # the shortcut checks travel with the version, so `mlflow ui` shows them beside accuracy
    assert "eval_length_baseline_accuracy" in tags and "reference_ref_gt_off_topic" in tags
    assert tags["rubric_aggregate"] == "mean"
    # the completions where `mlflow ui` shows tables: each watch check's answers, each evaluated policy's replies
    table = out["watch_table"]
    assert sorted(set(table["step"])) == [0, 1, 2] and len(table["completion"]) == 3 * watch["watch_n"]
    assert all(k is not None for k in table["kl"]) and table["kl"][0] < 1e-4  # step 0: the base policy itself
    assert set(out["eval_tables"]) == {"base", "grpo"}
    replies = [json.loads(line) for line in (work / "reports/evaluate_replies.jsonl").read_text().splitlines()]
    for policy, columns in out["eval_tables"].items():
        assert columns["completion"] == [r["text"] for r in replies if r["policy"] == policy]
        assert {"probe", "persona", "prompt", "finish_reason", "reward_model", "judge_total"} <= set(columns)


def test_stage_two_registry_lineage_and_evaluation(dvc_repo):
    import json

    work, env = dvc_repo
    sh("dvc repro", work, env)
    check = r"""
import json
from mlflow.tracking import MlflowClient
from mascot.config import load_params
from mascot.registry import setup_tracking
setup_tracking(load_params())
client = MlflowClient()
champion = client.get_model_version_by_alias("mascot-group-rm", "champion")
director = client.search_model_versions("name='mascot-director'")[0]
runs = client.search_runs([client.get_experiment_by_name("mascot-director").experiment_id], "tags.evaluation = 'true'")
open(".mascot/check_group.json", "w").write(json.dumps({"champion": str(champion.version), "tags": champion.tags,
    "director_tags": director.tags, "conditions": sorted(r.data.tags["condition"] for r in runs),
    "tables": {r.data.tags["condition"]: client.load_table(r.info.experiment_id, "evaluate_group_conversations.json",
                                                           run_ids=[r.info.run_id]).to_dict("list") for r in runs}},
    default=str))
"""
    (work / ".mascot").mkdir(exist_ok=True)
    (work / ".mascot/check_group.py").write_text(check)
    sh("python .mascot/check_group.py", work, env)
    out = json.loads((work / ".mascot/check_group.json").read_text())
    assert out["champion"] == "1" and out["tags"]["granularity"] == "block" and "champion_reason" in out["tags"]
    assert out["director_tags"]["reward_model_uri"] == "models:/mascot-group-rm@champion"
    assert out["director_tags"]["reward_model_version"] == "1"
    assert out["conditions"] == ["base", "random", "round_robin", "trained"]  # one MLflow run per condition
    # each condition's conversations, where `mlflow ui` shows tables
    assert all(len(out["tables"][c]["conversation"]) == 2 and "collective_total" in out["tables"][c]
               for c in out["conditions"])
    assert out["director_tags"]["rubric_aggregate"] == "mean"
    # the probe of the group reward model reads the group model's own version and tags (the name is the URI's)
    probe = _json_of(sh("mascot probe --uri models:/mascot-group-rm@champion", work, env))
    assert probe["version"] == out["champion"] and probe["scores_in_training"] is not None
    assert probe["max_abs_diff"] is not None and probe["max_abs_diff"] < 1e-4
    episodes = json.loads((work / "reports/figures/episodes.json").read_text())
    assert episodes["episodes"] == 3 * 3 and episodes["valid_branches"] + episodes["invalid_branches"] == 9
    evaluation = json.loads((work / "reports/figures/evaluate_group.json").read_text())
    assert all(evaluation[c]["conversations"] == 2 for c in ("trained", "base", "random", "round_robin"))
    assert "## Highest" in (work / "reports/group/examples.md").read_text()
    pairs = [json.loads(line) for line in (work / "data/group/pairs.jsonl").read_text().splitlines()]
    assert pairs and all(p["granularity"] == "block" and p["chosen_id"].split("|b")[0] == p["prefix_id"]
                         == p["rejected_id"].split("|b")[0] for p in pairs)


def test_changing_margin_reruns_only_pairs_and_validate(dvc_repo):
    work, env = dvc_repo
    sh("dvc repro", work, env)
    # the README's baseline: a commit of dvc.lock that the comparison commands read the old figures from
    who = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER") for key, value in (("NAME", "m"), ("EMAIL", "m@m"))}
    assert "tag mascot-baseline" in sh("make baseline", work, {**env, **who})
    params = original = (work / "params.yaml").read_text()
    params = re.sub(r"score_margin: [0-9.]+", "score_margin: 0.0001", params)  # a change that still forms pairs
    (work / "params.yaml").write_text(params)
    try:
        out = sh("dvc repro validate", work, env)  # the data half; the model half then follows the new pairs
        assert ran_stages(out) == {"pairs", "validate"}, out
        diff = sh("dvc metrics diff mascot-baseline --all", work, env)
        assert "failed to load" not in diff and "metrics/pairs.json" in diff and "metrics/train_rm.json" in diff, diff
        assert "pairs.score_margin" in sh("dvc params diff mascot-baseline", work, env)
    finally:  # leave the shared repo as it was found (other modules use it): DVC's run cache restores the old outputs
        (work / "params.yaml").write_text(original)
    out = sh("dvc repro", work, env)
    assert ran_stages(out) == set(), out

