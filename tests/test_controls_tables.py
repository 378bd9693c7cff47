"""The embedded controls' benchmark (benchmarks/controls_embedded.py) reads a stage-2 control's repo into its table:
the figures it prints are the ones the repo's stages wrote."""
import json
from pathlib import Path

from benchmarks import controls_embedded as bench


def _write(work: Path, name: str, figures: dict) -> None:
    (work / "reports/figures").mkdir(parents=True, exist_ok=True)
    (work / "reports/figures" / f"{name}.json").write_text(json.dumps(figures))


def _episode(speaker: str, valid: bool = True) -> str:
    return json.dumps({"valid": valid, "turns": [{"role": "user", "speaker": "user", "text": "hi"},
                                                 {"role": "agent", "speaker": speaker, "text": "hello"}]})


def test_a_stage2_control_repo_reads_into_its_row(tmp_path):
    (tmp_path / "data/group").mkdir(parents=True)
    (tmp_path / "data/group/episodes.jsonl").write_text("\n".join(
        [_episode("The Beacon"), _episode("The Anchor"), _episode("The Anchor"), _episode("The Beacon", False)]) + "\n")
    _write(tmp_path, "pairs_group", {"pairs": 103})
    _write(tmp_path, "train_group_rm", {"train_pairs": 54, "eval_pairs": 49, "eval_accuracy": 0.898,
                                        "eval_accuracy_ci_low": 0.81, "eval_accuracy_ci_high": 0.98,
                                        "eval_length_baseline_accuracy": 0.67})
    _write(tmp_path, "train_director", {"watch_verdict": "improving", "watch_n": 20, "watch_why": "up",
                                        "reward_first_step": -4.0, "reward_last_step": 2.0})
    _write(tmp_path, "promote_group", {"promoted": False, "reason": "gate off later"})
    rate = {"mean": 0.25, "ci_low": 0.1, "ci_high": 0.4, "n": 24}
    _write(tmp_path, "evaluate_group", {"planted_feature": {
        "persona": "The Beacon", "rate": {"trained": {**rate, "mean": 0.75}, "base": rate, "random": rate},
        "trained_minus_base": {"mean": 0.5, "ci_low": 0.29, "ci_high": 0.71, "n": 24, "p_sign": 0.001},
        "trained_minus_random": {"mean": 0.5, "ci_low": 0.25, "ci_high": 0.75, "n": 24, "p_sign": 0.002}}})
    # the decision at the control's own gate, kept before the negative's gate is opened, wins over the file
    (tmp_path / ".mascot").mkdir()
    (tmp_path / ".mascot/promote_group_at_its_gate.json").write_text(json.dumps({"promoted": True, "reason": "ok"}))

    row = bench.group_figures("group-positive", tmp_path, {"to_evaluate_group": 600})
    assert row["planted_first_in_episodes"] == round(1 / 3, 3)  # the invalid episode does not count
    assert row["planted_persona"] == "The Beacon"  # read from evaluate_group's figures, not assumed
    assert row["promoted"] is True and row["rm_ci"] == [0.81, 0.98]
    assert row["planted_differences"]["base"] == {"mean": 0.5, "ci_low": 0.29, "ci_high": 0.71, "n": 24,
                                                  "p_sign": 0.001}
    line = bench.group_table([row]).splitlines()[-1]
    assert ("| 103 (54 / 49) | 0.898 [0.81, 0.98], 0.67 | @champion | improving (n 20) | 0.75 / 0.25 / 0.25 / - |"
            in line)
    assert "0.5 [0.29, 0.71], n 24, sign p 0.001" in line and line.endswith("| 10 |")
