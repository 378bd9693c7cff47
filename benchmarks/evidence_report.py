"""The evidence run's report (benchmarks/evidence.py): what each link of the chain measured, as Markdown.

    python benchmarks/evidence_report.py [--workdir runs/evidence]

Reads only the run's own outputs (reports/figures/*.json, reports/*.jsonl, reports/evidence_times.json). Every
comparison carries its n and interval; below stats.min_n it says "too few to tell". The verdicts name the
first link that did not hold (judge agreement, reward-model accuracy, GRPO's reward, the watch, evaluate).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from benchmarks.stages import stage_rows  # noqa: E402  (after the path)

# each stage process's wall time and peak memory as it ends (mascot/cli.py), set by benchmarks/evidence.py: it
# survives an attempt that is stopped, whose own figure (the largest child DVC waited for) does not
STAGE_STATS = "reports/stage_stats.jsonl"


def _load(workdir: Path, name: str) -> dict:
    path = workdir / "reports" / "figures" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _interval(m: dict, key: str) -> str:
    """`value [low, high], n N` from a metrics block's key, key_ci_low, key_ci_high, key_n."""
    if m.get(key) is None:
        return "not measured"
    lo, hi, n = m.get(f"{key}_ci_low"), m.get(f"{key}_ci_high"), m.get(f"{key}_n")
    text = _fmt(m[key]) + (f" [{_fmt(lo)}, {_fmt(hi)}]" if lo is not None else "")
    return text + (f", n {n}" if n is not None else "")


def _comparison(fig: dict, min_n: int) -> tuple[str, str, str, str]:
    """(difference [interval], n, sign-test p, reading) of a paired figure."""
    from mascot.stats import TOO_FEW

    if not fig or fig.get("n", 0) == 0:
        return "-", "0", "-", "no data"
    diff = fig.get("diff", fig.get("mean"))
    text = f"{_fmt(diff)} [{_fmt(fig.get('ci_low'))}, {_fmt(fig.get('ci_high'))}]"
    if fig["n"] < min_n:
        reading = TOO_FEW
    elif fig.get("ci_low") is not None and fig["ci_low"] > 0:
        reading = "up"
    elif fig.get("ci_high") is not None and fig["ci_high"] < 0:
        reading = "down"
    else:
        reading = "no difference shown"
    return text, str(fig["n"]), _fmt(fig.get("p_sign")), reading


def _equal_length_cells(eq: dict | None) -> str:
    """An equal-length figure's two cells: the intercept (its interval; "extrapolated" where the data never reach
    equal length), then the length-matched subset."""
    if not eq:
        return " | "
    head = f"{_fmt(eq.get('mean'))} [{_fmt(eq.get('ci_low'))}, {_fmt(eq.get('ci_high'))}]"
    if eq.get("extrapolated"):
        head += f" (extrapolated: {_fmt(eq.get('overlap'))} of probes at or past equal length)"
    m = eq.get("matched") or {}
    return f"{head} | {_fmt(m.get('mean'))} [{_fmt(m.get('ci_low'))}, {_fmt(m.get('ci_high'))}], {m.get('n')}"


def _length_controlled(m: dict, key: str) -> str:
    """A reward model's accuracy at equal length (KEY_equal_length*): the intercept, its interval, n, whether it is
    extrapolated, and the length-matched subset."""
    eq = f"{key}_equal_length"
    if m.get(eq) is None:
        return "not measured"
    text = f"{_fmt(m[eq])} [{_fmt(m.get(eq + '_ci_low'))}, {_fmt(m.get(eq + '_ci_high'))}], n {m.get(eq + '_n')}"
    if m.get(eq + "_extrapolated"):
        text += " (extrapolated)"
    return text + f"; length-matched {_fmt(m.get(eq + '_matched'))} (n {m.get(eq + '_matched_n')})"


def speaker_table(evaluate: dict, dimensions: list[str], min_n: int) -> list[str]:
    diffs = evaluate.get("grpo_minus_base", {})
    lines = ["| figure | base | GRPO | GRPO - base [95% interval] | n | sign-test p | reading | "
             "at equal length [95% interval over conversations] | length-matched [95%], n |",
             "| --- | ---: | ---: | --- | ---: | ---: | --- | --- | --- |"]
    for key, label in ([(f"judge_{d}", d) for d in dimensions] + [("judge_total", "**total (mean of the five)**"),
                       ("judge_total_not_longer", "total, where the GRPO reply is not longer"),
                       ("rm_score", "reward model"), ("reply_words", "reply words")]):
        fig = diffs.get(key, {})
        diff, n, p, reading = _comparison(fig, min_n)
        lines.append(f"| {label} | {_fmt(fig.get('base'))} | {_fmt(fig.get('grpo'))} | {diff} | {n} | {p} | {reading} | "
                     f"{_equal_length_cells(fig.get('equal_length'))} |")
    clip = (evaluate.get("base", {}).get("clipped_fraction"), evaluate.get("grpo", {}).get("clipped_fraction"))
    lines.append(f"| replies cut at the token budget | {_fmt(clip[0])} | {_fmt(clip[1])} | | | | | | |")
    return lines


def director_table(workdir: Path, group: dict, dimensions: list[str], min_n: int) -> list[str]:
    """Per condition: the Director's unconstrained parse rate, the collective score (a failed conversation at the
    floor), each collective dimension; then trained - base and trained - each baseline, paired by conversation, each
    also at equal length (regressed on the difference in the block's agent words, as evaluate_group does)."""
    from mascot.policy.evaluate_group import block_words, paired_vs
    from mascot.splits import conversation_of

    conditions = [c for c in ("trained", "base", "random", "round_robin") if c in group]
    lines = ["| condition | conversations | parse rate, unconstrained | parse rate as decoded (valid) | "
             "collective total, all | " + " | ".join(dimensions) + " |",
             "| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(dimensions)]
    for c in conditions:
        m = group[c]
        free = m.get("directive_parse_rate_unconstrained")
        lines.append(f"| {c} | {m.get('conversations')} | {'-' if free is None else _fmt(free)} | "
                     f"{_fmt(m.get('valid_rate'))} | "
                     f"{_fmt(m.get('collective_total_with_failures'))} | " +
                     " | ".join(_fmt(m.get(f"collective_{d}")) for d in dimensions) + " |")
    records = _rows(workdir / "reports/evaluate_group_conversations.jsonl")
    by, words = {}, {}
    for r in records:
        scored = (r.get("collective") or {}).get("status") == "scored"
        by.setdefault(r["condition"], {})[r["query_id"]] = r["collective"] if scored else None
        words.setdefault(r["condition"], {}).update(block_words([r]))
    conversation = {q["query_id"]: conversation_of(q) for q in _rows(workdir / "data/queries.jsonl")}
    lines += ["", "| trained minus | figure | difference [95% interval] | n | sign-test p | reading | "
              "at equal length (block words) [95% interval over conversations] | length-matched [95%], n |",
              "| --- | --- | --- | ---: | ---: | --- | --- | --- |"]
    if group.get("trained_minus_base_unconstrained_parse_rate"):
        diff, n, p, reading = _comparison(group["trained_minus_base_unconstrained_parse_rate"], min_n)
        lines.append(f"| base | parse rate, unconstrained (per conversation) | {diff} | {n} | {p} | {reading} | | |")
    for other in [c for c in conditions if c != "trained"]:
        both = [q for q in set(by.get("trained", {})) & set(by.get(other, {})) if by["trained"][q] and by[other][q]]
        for key in ["total_reward"] + dimensions:
            get = (lambda s: s["total_reward"]) if key == "total_reward" else (lambda s, k=key: s["scores"][k])
            fig = paired_vs({q: get(by[other][q]) for q in both}, {q: get(by["trained"][q]) for q in both}, min_n,
                            (words.get(other, {}), words.get("trained", {})), conversation)
            eq = fig.pop("equal_length")
            diff, n, p, reading = _comparison(fig, min_n)
            label = "collective total (both valid)" if key == "total_reward" else key
            lines.append(f"| {other} | {label} | {diff} | {n} | {p} | {reading} | {_equal_length_cells(eq)} |")
    return lines


def verdicts(judge_check: dict, rm: dict, grpo: dict, evaluate: dict) -> list[str]:
    """Each link of the chain, in order, held or not, by its own figure."""
    out = []
    low = judge_check.get("human_pairs_ci_low")
    out.append(("judge agrees with people", low is not None and low > 0.5,
                f"human pairs {_interval(judge_check, 'human_pairs')}; the longer turn wins "
                f"{_interval(judge_check, 'human_length_baseline')}"))
    lb = rm.get("eval_length_baseline_accuracy")
    ok = rm.get("eval_accuracy_ci_low") is not None and rm["eval_accuracy_ci_low"] > max(0.5, lb or 0.5)
    out.append(("reward model ranks the judge's pairs", ok,
                f"{_fmt(rm.get('eval_accuracy'))} [{_fmt(rm.get('eval_accuracy_ci_low'))}, "
                f"{_fmt(rm.get('eval_accuracy_ci_high'))}] on {rm.get('eval_pairs')} eval pairs; length baseline {_fmt(lb)}"))
    if rm.get("human_pairs") is not None:  # the seekers' held-out pairs: what people prefer, length controlled
        heq = {k: rm.get(f"human_pairs_equal_length{k}") for k in ("", "_ci_low", "_ci_high", "_extrapolated")}
        out.append(("reward model agrees with people, at equal length",
                    (heq["_ci_low"] or 0) > 0.5 and not heq["_extrapolated"],
                    f"untrained human pairs {_fmt(rm['human_pairs'])} [{_fmt(rm.get('human_pairs_ci_low'))}, "
                    f"{_fmt(rm.get('human_pairs_ci_high'))}], n {rm.get('human_pairs_n')}; the longer turn wins "
                    f"{_fmt(rm.get('human_length_baseline'))}; at equal length {_fmt(heq[''])} "
                    f"[{_fmt(heq['_ci_low'])}, {_fmt(heq['_ci_high'])}]" + (" (extrapolated)" if heq["_extrapolated"]
                                                                           else "")))
    first, last = grpo.get("reward_first_quarter"), grpo.get("reward_last_quarter")
    out.append(("GRPO's reward rose", first is not None and last is not None and last > first,
                f"mean reward first quarter {_fmt(first)} -> last quarter {_fmt(last)} over {grpo.get('steps')} steps"))
    out.append(("the watch says improving", grpo.get("watch_verdict") == "improving",
                f"{grpo.get('watch_verdict')}: {grpo.get('watch_why')}"))
    j = evaluate.get("grpo_minus_base", {}).get("judge_total", {})
    out.append(("evaluate: the judge prefers GRPO on held-out probes", (j.get("ci_low") or 0) > 0,
                f"{_fmt(j.get('diff'))} [{_fmt(j.get('ci_low'))}, {_fmt(j.get('ci_high'))}], n {j.get('n')}"))
    eq = j.get("equal_length") or {}
    out.append(("evaluate: ... and at equal length", (eq.get("ci_low") or 0) > 0 and not eq.get("extrapolated"),
                f"{_fmt(eq.get('mean'))} [{_fmt(eq.get('ci_low'))}, {_fmt(eq.get('ci_high'))}], n {eq.get('n')}"
                + (" (extrapolated)" if eq.get("extrapolated") else "")))
    lines = ["| link | held | figure |", "| --- | --- | --- |"]
    broke = None
    for name, ok, fig in out:
        lines.append(f"| {name} | {'yes' if ok else '**no**'} | {fig} |")
        broke = broke or (None if ok else name)
    lines.append("")
    lines.append(f"First link that did not hold: **{broke}**." if broke else "Every link held.")
    return lines


CONTRASTS = {"ref_gt_echo": "an echo chamber", "ref_gt_off_topic": "an off-topic block", "ref_gt_redundant": "a redundant block"}


def collective_judge_lines(jcg: dict) -> list[str]:
    """The collective judge on its reference set, each contrast with interval and n, and what stage 2's figures rest
    on: below a lower bound of 0.5 against the echo chamber, chance (every collective figure after it is read so)."""
    if not jcg:
        return ["- not measured (no reports/figures/judge_check_group.json)"]
    lines = [f"- human block > {name}: {_interval(jcg, key)}" for key, name in CONTRASTS.items() if key in jcg]
    told = [name for key, name in CONTRASTS.items() if (jcg.get(f"{key}_ci_low") or 0) > 0.5]
    untold = [name for key, name in CONTRASTS.items() if key in jcg and name not in told]
    n = jcg.get("ref_gt_echo_n")
    if CONTRASTS["ref_gt_echo"] not in told:
        lines.append(f"- **stage 2's collective figures rest on chance**: the collective judge cannot tell a human "
                     f"block from an echo chamber (n {n}); the group reward model, the Director's reward and "
                     "evaluate_group's collective scores learn and measure its noise")
    else:
        lines.append(f"- the collective judge tells a human block from {' and '.join(told)} (interval above 0.5, n {n})"
                     + (f"; not from {' or '.join(untold)}: what stage 2 learns of those rests on chance" if untold else ""))
    return lines


def survey_table(collective: dict, group_rm: dict, min_n: int) -> list[str]:
    """Stage 2 against people: the collective judge (judge_check_group's chosen run) and the group reward model
    (train_group_rm, on the same human blocks) against the seekers' survey of each conversation: Spearman and the
    pair figure (of two conversations whose survey differs by the gap, the better-rated one scored higher), each with
    its interval over conversations and n."""
    from mascot.annotate.survey import survey_rows
    from mascot.stats import TOO_FEW

    judge = collective  # the chosen format's figures are the check's own (its other formats under by_prompt_style)
    lines = ["| scorer | survey key | Spearman [95%] | n conversations | better-rated scored higher [95%] | n pairs |",
             "| --- | --- | --- | ---: | --- | ---: |"]
    for label, flat, prefix in (("collective judge", judge, "survey"), ("group reward model", group_rm,
                                                                          "reference_survey")):
        for r in survey_rows(flat, prefix):
            few = f" ({TOO_FEW})" if r["n"] < min_n else ""
            lines.append(f"| {label} | {r['key']} | {_fmt(r['spearman'])} [{_fmt(r['spearman_ci_low'])}, "
                         f"{_fmt(r['spearman_ci_high'])}]{few} | {r['n']} | {_fmt(r['pairs'])} "
                         f"[{_fmt(r['pairs_ci_low'])}, {_fmt(r['pairs_ci_high'])}] | {r['pairs_n']} |")
    return lines if len(lines) > 2 else ["- not measured (no surveyed conversation among the reference items)"]


def group_data_lines(pairs_group: dict, group_rm: dict, promote_group: dict) -> list[str]:
    """Stage 2's block pairs and the group reward model beside "the longer block wins", raw and at equal length."""
    return [f"- block pairs: {pairs_group.get('pairs')} ({pairs_group.get('train_pairs')} train, "
            f"{pairs_group.get('eval_pairs')} eval); the chosen block is the longer in "
            f"{_fmt(pairs_group.get('chosen_longer_fraction'))} (before length balancing "
            f"{_fmt(pairs_group.get('chosen_longer_fraction_before_balance'))})",
            f"- group reward model: {_interval(group_rm, 'eval_accuracy')} on {group_rm.get('eval_pairs')} eval pairs; "
            f"the longer block wins {_fmt(group_rm.get('eval_length_baseline_accuracy'))}; at equal length "
            f"{_length_controlled(group_rm, 'eval_accuracy')}; where the chosen block is not longer "
            f"{_fmt(group_rm.get('eval_accuracy_not_longer'))} ({group_rm.get('eval_not_longer_pairs')} pairs)",
            f"- promote_group: {promote_group.get('promoted')} ({promote_group.get('reason')})"]


def stage_peaks(rows: list[dict]) -> dict[str, float]:
    """Each stage's peak memory (GiB) from what its own `mascot` process recorded as it ended
    (benchmarks/stages.py's rows): the larger of its own and its children's (a training stage's ranks), the
    largest over the attempts that ran it. A stage process that was killed recorded nothing."""
    peaks: dict[str, float] = {}
    for r in rows:
        gib = max(r["peak_rss_mb"], r["peak_rss_children_mb"]) / 1024
        peaks[r["stage"]] = round(max(peaks.get(r["stage"], 0.0), gib), 2)
    return peaks


def times_table(attempts: list[dict], peaks: dict[str, float] | None = None) -> list[str]:
    """Each stage's seconds summed over the attempts that ran it (a stage stopped and resumed counts both parts)
    and its peak memory (`peaks`, by stage_peaks), the wall time of all attempts, how many were stopped, and the
    largest peak: of the attempts that ended (their largest child) and of the stages that recorded one."""
    peaks = peaks or {}
    spent: dict[str, float] = {}
    for a in attempts:
        for s in a["stages"]:
            if s["seconds"] is not None:
                spent[s["stage"]] = spent.get(s["stage"], 0.0) + s["seconds"]
    lines = ["| stage | seconds | peak GiB |", "| --- | ---: | ---: |"] + [
        f"| {k} | {v:.0f} | {peaks.get(k, '-')} |" for k, v in spent.items()]
    total = sum(a["wall_s"] for a in attempts)
    stopped = sum(bool(a.get("interrupted")) for a in attempts)
    peak = max([a["peak_rss_gib"] for a in attempts if a.get("peak_rss_gib") is not None] + list(peaks.values()),
               default=None)
    lines += [f"| **total wall (all attempts: {len(attempts)}, {stopped} of them stopped and resumed)** | "
              f"**{total:.0f}** | |", "", f"Peak memory of the largest process: {peak} GiB."]
    return lines


def write_report(workdir: Path, attempts: list[dict] | None = None) -> Path:
    import os

    from mascot.annotate.rubric import load_rubric
    from mascot.config import load_params

    workdir = Path(workdir)
    if attempts is None:
        times = workdir / "reports/evidence_times.json"
        attempts = json.loads(times.read_text())["attempts"] if times.exists() else []
    params = load_params(workdir / "params.yaml")
    # the rubric files are the run's own: its params name them relative to the run's folder
    persona_dims = list(load_rubric(workdir / params.score.rubric).dimensions)
    group_dims = list(load_rubric(workdir / params.score_group.rubric).dimensions)
    min_n = params.stats.min_n
    judge_check, pairs, rm = _load(workdir, "judge_check"), _load(workdir, "pairs"), _load(workdir, "train_rm")
    promote, grpo, evaluate = _load(workdir, "promote"), _load(workdir, "train_grpo"), _load(workdir, "evaluate")
    group_rm, director, group = _load(workdir, "train_group_rm"), _load(workdir, "train_director"), \
        _load(workdir, "evaluate_group")
    collective_judge = _load(workdir, "judge_check_group")
    out = [f"# The evidence run ({workdir})", "",
           f"Machine: {os.cpu_count()} cores, {platform.machine()}; profile: profiles/evidence.yaml.", "",
           "## Verdicts (speaker)", "", *verdicts(judge_check, rm, grpo, evaluate), "",
           "## The speaker: base vs GRPO on held-out probes (evaluate)", "",
           *speaker_table(evaluate, persona_dims, min_n), "",
           "## The judge against people (judge_check)", "",
           f"- human pairs: {_interval(judge_check, 'human_pairs')}; the longer turn wins: "
           f"{_interval(judge_check, 'human_length_baseline')}",
           f"- where the preferred turn is not the longer: {_interval(judge_check, 'human_pairs_controlled')}",
           f"- human > off-topic {_interval(judge_check, 'ref_gt_off_topic')}; human > cold "
           f"{_interval(judge_check, 'ref_gt_cold')}", "",
           "## The collective judge on its reference set (judge_check_group)", "",
           *collective_judge_lines(collective_judge), "",
           "## Pairs and the reward models", "",
           f"- pairs: {pairs.get('pairs')} ({pairs.get('train_pairs')} train, {pairs.get('eval_pairs')} eval); train by "
           f"source {pairs.get('train_pairs_by_source')}; chosen longer {pairs.get('chosen_longer_fraction')}",
           f"- speaker reward model on judge pairs: {_interval(rm, 'eval_accuracy')} on {rm.get('eval_pairs')} pairs; "
           f"length baseline {_fmt(rm.get('eval_length_baseline_accuracy'))}; where the chosen reply is not longer "
           f"{_fmt(rm.get('eval_accuracy_not_longer'))} ({rm.get('eval_not_longer_pairs')} pairs)",
           f"- speaker reward model at equal length (judge's eval pairs): {_length_controlled(rm, 'eval_accuracy')}; "
           f"Pearson of its score with reply words on the eval candidates {_fmt(rm.get('eval_score_length_pearson'))}",
           f"- on the seekers' pairs of conversations it never trained on: {_interval(rm, 'human_pairs')}; the longer turn wins "
           f"{_interval(rm, 'human_length_baseline')}; at equal length {_length_controlled(rm, 'human_pairs')}; "
           f"where the preferred turn is not the longer {_interval(rm, 'human_pairs_controlled')}",
           f"- what `evaluate` calls the gains: the judge's {evaluate.get('judge_gain_is')}, the reward model's "
           f"{evaluate.get('rm_gain_is')}",
           f"- promotion: {promote.get('promoted')} ({promote.get('reason')})",
           f"- group reward model: {_interval(group_rm, 'eval_accuracy')} on {group_rm.get('eval_pairs')} pairs; length "
           f"baseline {_fmt(group_rm.get('eval_length_baseline_accuracy'))}", "",
           "## GRPO and the watch", "",
           f"- speaker: {grpo.get('steps')} steps; mean reward {_fmt(grpo.get('reward_first_quarter'))} (first quarter) -> "
           f"{_fmt(grpo.get('reward_last_quarter'))} (last); completions cut at the budget "
           f"{_fmt(grpo.get('mean_clipped_ratio'))}; watch ({grpo.get('watch_n')} probes): "
           f"**{grpo.get('watch_verdict')}** ({grpo.get('watch_why')}); chart: plots/train_grpo/watch.png",
           f"- Director: {director.get('steps')} steps; directive format {director.get('directive_format_first_step')} -> "
           f"{director.get('directive_format_last_step')}; watch: **{director.get('watch_verdict')}** "
           f"({director.get('watch_why')})", "",
           "## Stage 2's data and its reward model", "",
           *group_data_lines(_load(workdir, "pairs_group"), group_rm, _load(workdir, "promote_group")), "",
           "## Stage 2 against people: the seekers' survey", "", *survey_table(collective_judge, group_rm, min_n), "",
           "## The Director: trained vs base vs random vs round-robin (evaluate_group)", "",
           *director_table(workdir, group, group_dims, min_n), "",
           "## Stage times", "", *times_table(attempts, stage_peaks(stage_rows(workdir / STAGE_STATS))), ""]
    path = workdir / "reports/evidence.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out))
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="runs/evidence")
    print(write_report(Path(ap.parse_args().workdir).resolve()))
