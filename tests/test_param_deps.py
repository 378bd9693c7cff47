"""What a stage reads, recorded (mascot/reads.py), against what dvc.yaml declares (mascot/param_deps.py); and
the headline figures a stage's metrics file keeps (mascot/headline.py). The chain's own record is checked in
tests/test_pipeline_dvc.py."""
import json
from pathlib import Path

import yaml

from mascot import param_deps, reads
from mascot.config import load_params
from mascot.headline import HEADLINE, headline


def test_reading_a_field_records_its_dotted_path_and_a_nested_block_is_declared_whole(tmp_path, monkeypatch):
    params = load_params()
    monkeypatch.setenv(reads.ENV, str(tmp_path))
    monkeypatch.setattr(reads, "_stage", "train_rm")
    monkeypatch.setattr(reads, "_params", set())
    monkeypatch.setattr(reads, "_files", set())
    assert params.train_rm.learning_rate > 0 and params.train_rm.lora.r > 0 and params.validate_.min_pairs >= 0
    params.llm.speaker.model_dump()
    with reads.paused():
        params.grpo.model_dump()  # a checkpoint key: not a read
    reads.file_read("data/pairs.jsonl")
    reads.flush()
    record = reads.load(tmp_path)["train_rm"]
    assert {"train_rm.learning_rate", "train_rm.lora.r", "validate.min_pairs", "llm.speaker.model"} <= record["params"]
    assert not any(k.startswith("grpo") for k in record["params"]) and record["files"] == {"data/pairs.jsonl"}
    assert param_deps.units(record["params"]) >= {"train_rm.learning_rate", "train_rm.lora", "validate.min_pairs",
                                                  "llm.speaker"}


def test_a_stage_is_held_to_its_record():
    record = {"params": {"train_rm.learning_rate", "train_rm.lora.r", "stats.min_n"},
              "files": {"data/pairs.jsonl", "reports/figures/judge_check.json", "reports/figures/train_rm.json"}}
    stage = {"params": ["train_rm.learning_rate", "train_rm.lora", "mlflow"], "deps": ["data/pairs.jsonl"],
             "outs": ["models/reward", "reports/figures/train_rm.json"]}
    found = param_deps.check_stage(stage, record)
    assert found == {"missing_params": ["stats.min_n"], "not_in_params_yaml": [], "unread_params": ["mlflow"],
                     "missing_files": ["reports/figures/judge_check.json"]}
    # a whole block listed covers its keys
    assert not param_deps.check_stage({"params": ["train_rm", "stats"], "deps": ["data", "reports/figures"]},
                                      record)["missing_params"]


def test_the_headline_keeps_numbers_and_decisions_only():
    figures = {"eval_accuracy": 0.8, "eval_accuracy_ci_low": 0.7, "eval_pairs": 40, "judge_model": "models/judge",
               "grpo_minus_base": {"judge_total": {"diff": 0.2, "n": 31}}, "ref_gt_off_topic.perceived_empathy": 0.9}
    assert headline("train_rm", figures) == {"rm_acc": 0.8, "rm_eval_n": 40}
    assert headline("evaluate", figures) == {"grpo_gain": 0.2, "grpo_gain_n": 31}
    assert json.dumps(headline("promote", {"promoted": False, "reason": "x"})) == '{"rm_promoted": false}'


def test_headline_names_are_unique_across_the_pipeline():
    # DVC heads a column "metrics/<stage>.json:<name>" when two files share a name: the width `dvc exp show` fits in
    names = [name for block in HEADLINE.values() for name in block]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(HEADLINE) == set(yaml.safe_load(Path("dvc.yaml").read_text())["stages"])
