"""The evidence run's report (benchmarks/evidence_report.py): the first link that did not hold, by its figure."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _report():
    spec = importlib.util.spec_from_file_location("evidence_report", ROOT / "benchmarks/evidence_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUDGE = {"human_pairs": 0.67, "human_pairs_ci_low": 0.55, "human_pairs_ci_high": 0.8, "human_pairs_n": 72}
GRPO = {"reward_first_quarter": -1.0, "reward_last_quarter": -0.5, "steps": 100, "watch_verdict": "improving",
        "watch_why": "both up"}


def test_the_verdicts_name_the_first_link_that_broke():
    report = _report()
    rm_length = {"eval_accuracy": 0.6, "eval_accuracy_ci_low": 0.52, "eval_accuracy_ci_high": 0.68, "eval_pairs": 60,
                 "eval_length_baseline_accuracy": 0.58}
    evaluate = {"grpo_minus_base": {"judge_total": {"diff": 0.2, "ci_low": 0.05, "ci_high": 0.3, "n": 45,
                                                    "equal_length": {"mean": 0.1, "ci_low": 0.02, "ci_high": 0.2,
                                                                     "n": 45, "extrapolated": False}}}}
    lines = report.verdicts(JUDGE, rm_length, GRPO, evaluate)
    # the reward model's interval does not clear the length baseline: that link broke, whatever came after
    assert lines[-1] == "First link that did not hold: **reward model ranks the judge's pairs**."
    rm_ok = {**rm_length, "eval_accuracy_ci_low": 0.62}
    assert report.verdicts(JUDGE, rm_ok, GRPO, evaluate)[-1] == "Every link held."
    # a gain that is length: raw up, at equal length only by extrapolation
    length = {"grpo_minus_base": {"judge_total": {**evaluate["grpo_minus_base"]["judge_total"], "equal_length": {
        "mean": 0.1, "ci_low": 0.02, "ci_high": 0.2, "n": 45, "extrapolated": True, "overlap": 0.02}}}}
    assert report.verdicts(JUDGE, rm_ok, GRPO, length)[-1] == \
        "First link that did not hold: **evaluate: ... and at equal length**."
    flat = {"grpo_minus_base": {"judge_total": {"diff": 0.0, "ci_low": -0.1, "ci_high": 0.1, "n": 45}}}
    assert "evaluate" in report.verdicts(JUDGE, rm_ok, GRPO, flat)[-1]
    # a reward model that ranks the judge's pairs and agrees with people only as far as length does
    people = {**rm_ok, "human_pairs": 0.616, "human_pairs_ci_low": 0.5, "human_pairs_ci_high": 0.724,
              "human_pairs_n": 138, "human_length_baseline": 0.565, "human_pairs_equal_length": 0.556,
              "human_pairs_equal_length_ci_low": 0.471, "human_pairs_equal_length_ci_high": 0.646,
              "human_pairs_equal_length_extrapolated": False}
    lines = report.verdicts(JUDGE, people, GRPO, evaluate)
    assert lines[-1] == "First link that did not hold: **reward model agrees with people, at equal length**."
    assert "at equal length 0.556 [0.471, 0.646]" in "\n".join(lines)
    assert report.verdicts(JUDGE, {**people, "human_pairs_equal_length_ci_low": 0.52}, GRPO, evaluate)[-1] == \
        "Every link held."


def test_the_speaker_table_says_too_few_to_tell_below_min_n():
    report = _report()
    evaluate = {"grpo_minus_base": {
        "judge_total": {"base": 3.0, "grpo": 3.4, "diff": 0.4, "ci_low": 0.1, "ci_high": 0.7, "n": 45, "p_sign": 0.01},
        "judge_total_not_longer": {"base": 3.0, "grpo": 3.1, "diff": 0.1, "ci_low": 0.0, "ci_high": 0.3, "n": 6,
                                   "p_sign": 0.5}},
        "base": {"clipped_fraction": 0.9}, "grpo": {"clipped_fraction": 0.2}}
    table = "\n".join(report.speaker_table(evaluate, ["perceived_empathy"], 10))
    assert "| **total (mean of the five)** | 3.000 | 3.400 | 0.400 [0.100, 0.700] | 45 | 0.010 | up |" in table
    assert "| total, where the GRPO reply is not longer | 3.000 | 3.100 | 0.100 [0.000, 0.300] | 6 | 0.500 | too few to tell |" in table
    eq = {"mean": 0.05, "ci_low": -0.1, "ci_high": 0.2, "n": 45, "extrapolated": True, "overlap": 0.04,
          "matched": {"mean": 0.0, "ci_low": -0.2, "ci_high": 0.2, "n": 7}}
    evaluate["grpo_minus_base"]["judge_total"]["equal_length"] = eq
    table = "\n".join(report.speaker_table(evaluate, ["perceived_empathy"], 10))
    assert ("| up | 0.050 [-0.100, 0.200] (extrapolated: 0.040 of probes at or past equal length) | "
            "0.000 [-0.200, 0.200], 7 |") in table
    assert "| replies cut at the token budget | 0.900 | 0.200 |" in table
    assert "| perceived_empathy | - | - | - | 0 | - | no data |" in table



def test_a_reward_models_accuracy_at_equal_length_says_its_n_and_when_it_is_extrapolated():
    report = _report()
    rm = {"human_pairs_equal_length": 0.71, "human_pairs_equal_length_ci_low": 0.54,
          "human_pairs_equal_length_ci_high": 0.83, "human_pairs_equal_length_n": 126,
          "human_pairs_equal_length_extrapolated": False, "human_pairs_equal_length_matched": 0.78,
          "human_pairs_equal_length_matched_n": 23}
    assert report._length_controlled(rm, "human_pairs") == \
        "0.710 [0.540, 0.830], n 126; length-matched 0.780 (n 23)"
    rm["human_pairs_equal_length_extrapolated"] = True
    assert "n 126 (extrapolated); length-matched" in report._length_controlled(rm, "human_pairs")
    assert report._length_controlled(rm, "eval_accuracy") == "not measured"

def test_the_director_table_has_each_conditions_free_parse_rate_and_the_paired_change(tmp_path):
    report = _report()
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/evaluate_group_conversations.jsonl").write_text("")
    group = {"trained": {"conversations": 20, "valid_rate": 1.0, "directive_parse_rate_unconstrained": 0.825,
                         "collective_total_with_failures": 3.88},
             "random": {"conversations": 20, "valid_rate": 1.0, "collective_total_with_failures": 3.91},
             "trained_minus_base_unconstrained_parse_rate": {"mean": 0.3625, "ci_low": 0.2125, "ci_high": 0.5125,
                                                             "n": 20, "p_sign": 0.0005}}
    table = "\n".join(report.director_table(tmp_path, group, [], 10))
    assert "| trained | 20 | 0.825 | 1.000 | 3.880 |" in table
    assert "| random | 20 | - | 1.000 | 3.910 |" in table  # a scripted Director writes no directive text
    assert "| base | parse rate, unconstrained (per conversation) | 0.362 [0.212, 0.512] | 20 | 0.001 | up |" in table


def test_the_directors_paired_change_is_also_given_at_equal_block_length(tmp_path):
    """A trained Director whose blocks score more only by their words: up raw, nothing at equal length."""
    import json

    report = _report()
    (tmp_path / "reports").mkdir()
    rows = []
    for k in range(24):
        base_words, extra = 10 + k % 5, 4 * (k % 4)  # the trained block 0-12 words longer, paid 0.1 a word
        for condition, words in (("base", base_words), ("trained", base_words + extra)):
            rows.append({"condition": condition, "query_id": f"q{k}",
                         "turns": [{"role": "user", "text": "hi there"}, {"role": "agent", "text": "w " * words}],
                         "collective": {"status": "scored", "total_reward": 3.0 + 0.1 * words, "scores": {}}})
    (tmp_path / "reports/evaluate_group_conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    group = {c: {"conversations": 24, "valid_rate": 1.0} for c in ("trained", "base")}
    line = next(r for r in report.director_table(tmp_path, group, [], 10) if "collective total (both valid)" in r)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:2] == ["base", "collective total (both valid)"]
    assert cells[2].startswith("0.600 [") and cells[5] == "up"  # raw: 6 words on average, 0.1 each
    assert abs(float(cells[6].split(" [")[0])) < 1e-3  # at equal length: nothing
    assert cells[7].endswith(", 6")  # the length-matched subset (within 20%): the 6 of equal length


def test_a_stopped_evidence_attempt_is_recorded_and_its_stages_summed_with_the_next(tmp_path):
    """SIGTERM to `make evidence` mid-stage: the attempt's time so far is kept (it was lost before, so a run resumed
    over several attempts under-reported its wall time), and the report sums a resumed stage's parts."""
    import json
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "reports").mkdir()
    times = tmp_path / "reports/evidence_times.json"
    # DVC exits on SIGTERM and leaves its stage running: the fake's stage is a child that ignores its parent's end
    fake_dvc = "import subprocess, time; stage = subprocess.Popen(['sleep', '120']); " \
               "print(\"Running stage 'prepare':\", flush=True); print(f\"Running stage 'score': {stage.pid}\", flush=True); " \
               "time.sleep(120)"
    driver = (f"import sys, json; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import evidence; from pathlib "
              f"import Path; p = Path({str(times)!r}); evidence.run_repro(Path({str(tmp_path)!r}), None, None, "
              f"lambda a: p.write_text(json.dumps({{'attempts': [a]}})), [sys.executable, '-c', {fake_dvc!r}])")
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if "score" in line:
            stage_pid = int(line.split()[-1])
            break
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    attempt = json.loads(times.read_text())["attempts"][0]
    assert attempt["interrupted"] and attempt["exit_code"] is not None and attempt["wall_s"] >= 1
    status = Path(f"/proc/{stage_pid}/status")
    assert not status.exists() or "State:\tZ" in status.read_text(), "the stopped attempt left its stage running"
    assert attempt["peak_rss_gib"] is None  # the stopped stage was never waited for: its memory is unknown
    assert [s["stage"] for s in attempt["stages"]] == ["prepare", "score"]
    assert attempt["stages"][1]["seconds"] >= 1  # the stopped stage's time so far
    resumed = {"wall_s": 10.0, "peak_rss_gib": 2.0, "stages": [{"stage": "score", "seconds": 10.0}]}
    table = "\n".join(_report().times_table([attempt, resumed]))
    assert f"| score | {attempt['stages'][1]['seconds'] + 10:.0f} |" in table
    assert "all attempts: 2, 1 of them stopped and resumed" in table


def test_each_stages_peak_memory_comes_from_what_its_process_recorded_and_survives_a_stopped_attempt(tmp_path):
    """A stopped attempt has no peak of its own (the stage DVC never waited for); the stages that ended before it
    recorded theirs (mascot/cli.py, MASCOT_STAGE_STATS as benchmarks/evidence.py sets it): the report gives each
    stage's largest over the attempts and the run's peak from them."""
    import json

    from mascot.cli import record_stage_stats

    report = _report()
    stats = tmp_path / report.STAGE_STATS
    stats.parent.mkdir(parents=True)
    record_stage_stats(str(stats), ["train_rm", "--params", "p.yaml"], 12.0, 0)  # this process's peaks, real
    recorded = json.loads(stats.read_text())  # its own and its children's (a test worker has had some)
    own = max(recorded["peak_rss_mb"], recorded["peak_rss_children_mb"])
    with stats.open("a") as fh:  # a stage whose ranks were larger than its launcher, recorded on two attempts
        for mine, ranks in ((1024.0, 61440.0), (1024.0, 3072.0)):  # above any test worker's own
            fh.write(json.dumps({"command": "train_grpo", "wall_s": 5.0, "peak_rss_mb": mine,
                                 "peak_rss_children_mb": ranks, "status": 0}) + "\n")
    from benchmarks.stages import stage_rows

    peaks = report.stage_peaks(stage_rows(stats))
    assert peaks == {"train_rm": round(own / 1024, 2), "train_grpo": 60.0}
    stopped = {"wall_s": 30.0, "peak_rss_gib": None, "interrupted": True,
               "stages": [{"stage": "train_rm", "seconds": 12.0}, {"stage": "train_grpo", "seconds": 18.0}]}
    table = "\n".join(report.times_table([stopped], peaks))
    assert "| train_grpo | 18 | 60.0 |" in table and "Peak memory of the largest process: 60.0 GiB." in table


def test_the_report_says_stage_two_rests_on_chance_when_the_collective_judge_cannot_tell_an_echo():
    report = _report()
    chance = {"ref_gt_echo": 0.625, "ref_gt_echo_ci_low": 0.25, "ref_gt_echo_ci_high": 0.875, "ref_gt_echo_n": 8,
              "ref_gt_off_topic": 0.5, "ref_gt_off_topic_ci_low": 0.25, "ref_gt_off_topic_ci_high": 0.75}
    assert "rest on chance" in report.collective_judge_lines(chance)[-1]
    # the evidence judge at 40 items (docs/results.md, 2026-12-04): it tells an echo, not an off-topic block
    tells_echo = {**chance, "ref_gt_echo": 0.675, "ref_gt_echo_ci_low": 0.525, "ref_gt_echo_n": 40}
    verdict = report.collective_judge_lines(tells_echo)[-1]
    assert "tells a human block from an echo chamber" in verdict and "not from an off-topic block" in verdict
    assert report.collective_judge_lines({}) == ["- not measured (no reports/figures/judge_check_group.json)"]
