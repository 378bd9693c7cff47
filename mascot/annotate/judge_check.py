"""A judge measured on a fixed reference set before anything trusts it, on the rubric it will score with (the
`judge_check` stages: mascot/stages/judge_check.py).

For each configured prompt format (and judge mode) the reference set of the granularity (see
reference_set.py) is scored by the same code that scores candidates or blocks. Stage 1: how often the judge
ranks the human reply above an off-topic and a cold reply; stage 2: how often it ranks the human supporter's
block above an echo chamber, an off-topic block and a redundant one. Each with bootstrap 95% intervals and n,
on the total and per dimension; then whether the dimensions are one signal, how much probability the judge
puts on the digits (expected mode) or how often its JSON fails (json mode), how much length drives its scores
(a padded reference), and, with two modes, how far they agree.

Against people (stage 1): with a human reference set (the `human_set` stage: supporter turns the seekers
rated), every format and mode is also measured on how often the higher-rated turn of a pair scores higher,
beside "the longer turn wins" and length-controlled (mascot/data/human_ratings.py). `score.prompt_style: auto`
then scores in the format that agrees with people best; without a human set, in the one that ranked the
synthetic contrasts best (stage 2 uses stage 1's choice). Stage 2 measures its collective judge against the
seekers' survey of whole conversations (`survey_score`: empathy, relevance) where the corpus has it.
"""
from __future__ import annotations

from pathlib import Path
from statistics import fmean

from mascot.annotate.function_judge import scorer_for
from mascot.annotate.survey import describe_survey, flat_survey_figures, survey_figures
from mascot.annotate.score import resolve_prompt_style, score_units
from mascot.config import Params, ScoreParams
from mascot.data import human_ratings
from mascot.granularity import Granularity, REPLY
from mascot.io import load_jsonl
from mascot.splits import is_held_out
from mascot.stats import (DEFAULT_MIN_N, correlation_matrix, equal_length_figures, first_component_share, mean_with_ci,
                          pairwise_wins, spearman)


def _by_item(candidates: list[dict], scores: list[dict]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for c, s in zip(candidates, scores):
        out.setdefault(c["query_id"], {})[c["reply_type"]] = {**s, "kind": c["kind"], "text": c["text"]}
    return out


def analyse(candidates: list[dict], scores: list[dict], mode: str, g: Granularity = REPLY, dimensions=None,
            min_n: int = DEFAULT_MIN_N) -> dict:
    """All figures of one (prompt format, mode) run over the reference set (`candidates`: its variants)."""
    dimensions = list(dimensions or g.rubric().dimensions)
    items = _by_item(candidates, scores)
    scored = [(c, s) for c, s in zip(candidates, scores) if s["status"] == "scored"]
    out: dict = {"replies": len(scores), "scored": len(scored), "unscored": len(scores) - len(scored)}
    for name, better, worse, kind in g.judge_comparisons:
        both = [r for r in items.values() if r.get(better, {}).get("status") == "scored"
                and r.get(worse, {}).get("status") == "scored" and r[better]["kind"] == kind]
        wins = pairwise_wins([r[better]["total_reward"] for r in both], [r[worse]["total_reward"] for r in both])
        out[name] = mean_with_ci(wins, null=0.5, min_n=min_n)
        out[name]["ties"] = sum(w == 0.5 for w in wins)
        out[name]["by_dimension"] = {
            d: round(fmean(pairwise_wins([r[better]["scores"][d] for r in both],
                                         [r[worse]["scores"][d] for r in both])), 4) if both else None
            for d in dimensions}
        out[name]["by_dimension_ci"] = {
            d: mean_with_ci(pairwise_wins([r[better]["scores"][d] for r in both],
                                          [r[worse]["scores"][d] for r in both]), null=0.5, min_n=min_n)
            for d in dimensions}
    dims = {d: [s["scores"][d] for _, s in scored] for d in dimensions}
    matrix = correlation_matrix(dims)
    off = [matrix[a][b] for i, a in enumerate(dimensions) for b in dimensions[i + 1:] if matrix[a][b] is not None]
    out["dimension_correlation"] = matrix
    out["mean_dimension_correlation"] = round(fmean(off), 4) if off else None
    out["first_component_share"] = first_component_share(dims)
    if mode == "expected":
        masses = [m for s in scores for m in (s.get("choice_mass") or {}).values()]
        out["mean_choice_mass"] = round(fmean(masses), 4) if masses else None
        out["min_choice_mass"] = round(min(masses), 4) if masses else None
    else:
        out["parse_failure_rate"] = round(out["unscored"] / len(scores), 4) if scores else None
    real = [(c, s) for c, s in scored if c["reply_type"] != "reference_padded"]
    out["length_spearman"] = spearman([len(c["text"].split()) for c, _ in real], [s["total_reward"] for _, s in real])
    refs = [(c, s) for c, s in real if c["reply_type"] == "reference"]
    out["length_spearman_references"] = spearman([len(c["text"].split()) for c, _ in refs],
                                                 [s["total_reward"] for _, s in refs])
    probe = [r for r in items.values() if r.get("reference", {}).get("status") == "scored"
             and r.get("reference_padded", {}).get("status") == "scored"]
    deltas = [r["reference_padded"]["total_reward"] - r["reference"]["total_reward"] for r in probe]
    out["length_probe"] = {**mean_with_ci(deltas, min_n=min_n), "up_fraction": round(fmean(d > 0 for d in deltas), 4) if deltas else None}
    by_type: dict[str, list[float]] = {}
    for c, s in scored:
        by_type.setdefault(c["reply_type"], []).append(s["total_reward"])
    out["mean_total_by_reply_type"] = {t: round(fmean(v), 4) for t, v in by_type.items()}
    return out


def mode_agreement(candidates: list[dict], a: list[dict], b: list[dict], g: Granularity = REPLY,
                   min_n: int = DEFAULT_MIN_N) -> dict:
    """How far two judge modes agree on the same items: rank correlation of totals, and how often they
    make the same call on the reference against each worse variant."""
    both = [(x["total_reward"], y["total_reward"]) for x, y in zip(a, b)
            if x["status"] == "scored" and y["status"] == "scored"]
    ia, ib = _by_item(candidates, a), _by_item(candidates, b)
    same = []
    for item_id in ia:
        for worse in {w for _, _, w, _ in g.judge_comparisons}:
            pa, pb = ia[item_id], ib[item_id]
            if all(p.get(t, {}).get("status") == "scored" for p in (pa, pb) for t in ("reference", worse)):
                same.append(float((pa["reference"]["total_reward"] > pa[worse]["total_reward"])
                                  == (pb["reference"]["total_reward"] > pb[worse]["total_reward"])))
    return {"total_spearman": spearman([x for x, _ in both], [y for _, y in both]),
            "same_call": mean_with_ci(same, null=None, min_n=min_n)}


def human_pair_accuracy(fig: dict) -> float | None:
    """The judge's agreement with people in one run's figures (None: no human set was measured)."""
    return ((fig.get("human") or {}).get("pairs") or {}).get("mean")


def choose_style(by_style: dict[str, dict], g: Granularity = REPLY) -> str:
    """The prompt format that agrees with people best when every format was measured on a human set, else the
    one whose gated accuracies are highest on average (ties: the first configured)."""
    by_people = all(human_pair_accuracy(fig) is not None for fig in by_style.values())

    def merit(fig: dict) -> float:
        if by_people:
            return human_pair_accuracy(fig)
        vals = [fig[name]["mean"] for name in g.gated if fig[name]["mean"] is not None]
        return fmean(vals) if vals else -1.0
    return max(by_style, key=lambda s: merit(by_style[s]))


def survey_agreement(items: list[dict], variants: list[dict], scores: list[dict], min_gap: float = 2,
                     min_n: int = DEFAULT_MIN_N) -> dict:
    """Stage 2 against people: the judge's total for each item's human block against the seekers' survey of that
    conversation (mascot/annotate/survey.py: Spearman and the pair figure per survey key, intervals over
    conversations; one block per conversation)."""
    survey = {i["item_id"]: (i.get("survey") or {}, i.get("conversation_id", i["item_id"])) for i in items}
    return survey_figures([(*survey[v["query_id"]], s["total_reward"]) for v, s in zip(variants, scores)
                           if v["reply_type"] == "reference" and s["status"] == "scored"], min_gap, min_n)


def run_judge_check(items: list[dict], personas: dict, score_params: ScoreParams, backend, styles: list[str],
                    modes: list[str], journal_for=None, g: Granularity = REPLY, rubric=None,
                    human_items: list[dict] | None = None, min_gap: int = 2, min_n: int = DEFAULT_MIN_N,
                    survey_min_gap: float = 2) -> tuple[dict, dict[tuple[str, str], list[dict]], list[dict]]:
    """Score the reference items in every (format, mode) on `rubric` (default: the granularity's shipped one);
    `journal_for(style, mode, part)` gives each run its journal (part: "reference" or "human"). `human_items`
    (stage 1): rated supporter turns, scored too and measured against their ratings (figures under "human";
    their records in the report's "human_scores")."""
    rubric = rubric or g.rubric()
    candidates, units = g.reference_units(items, personas)
    if human_items:
        human_units = g.judge_units(*human_ratings.as_candidates(human_items), personas)
    raw: dict[tuple[str, str], list[dict]] = {}
    report: dict = {"by_prompt_style": {}, "human_scores": {}}
    for style in styles:
        per_mode = {}
        for mode in modes:
            params = score_params.model_copy(update={"mode": mode})
            journal = journal_for(style, mode, "reference") if journal_for else None
            raw[(style, mode)] = score_units(units, rubric, params, backend, journal, prompt_style=style)
            per_mode[mode] = analyse(candidates, raw[(style, mode)], mode, g, rubric.dimensions, min_n)
            if g.survey_ratings:
                per_mode[mode]["survey"] = survey_agreement(items, candidates, raw[(style, mode)], survey_min_gap,
                                                            min_n)
            if human_items:
                journal = journal_for(style, mode, "human") if journal_for else None
                records = score_units(human_units, rubric, params, backend, journal, prompt_style=style)
                report["human_scores"][f"{style}/{mode}"] = records
                total, dims = human_ratings.scores_by_item(human_items, records, rubric.dimensions)
                per_mode[mode]["human"] = human_ratings.agreement(human_items, total, min_gap, dims, min_n)
        if len(modes) == 2:
            per_mode["mode_agreement"] = mode_agreement(candidates, raw[(style, modes[0])], raw[(style, modes[1])], g,
                                                        min_n)
        report["by_prompt_style"][style] = per_mode
    return report, raw, candidates


def headline(fig: dict, g: Granularity = REPLY) -> dict:
    """The flat figures of one run for `dvc metrics show` (per dimension too: `<figure>.<dimension>`)."""
    out = {}
    for name, *_ in g.judge_comparisons:
        f = fig[name]
        out.update({name: f["mean"], f"{name}_ci_low": f["ci_low"], f"{name}_ci_high": f["ci_high"], f"{name}_n": f["n"]})
        out.update({f"{name}.{d}": v for d, v in f["by_dimension"].items()})
        for d, ci in (f.get("by_dimension_ci") or {}).items():
            out.update({f"{name}.{d}_ci_low": ci["ci_low"], f"{name}.{d}_ci_high": ci["ci_high"]})
    for key in ("mean_dimension_correlation", "first_component_share", "length_spearman", "mean_choice_mass",
                "parse_failure_rate", "unscored"):
        if key in fig:
            out[key] = fig[key]
    out["length_probe_delta"] = fig["length_probe"]["mean"]
    out["length_probe_up_fraction"] = fig["length_probe"]["up_fraction"]
    if fig.get("human"):
        out.update(human_headline(fig["human"]))
    if fig.get("survey"):
        out.update(flat_survey_figures(fig["survey"]))
    return out


def human_headline(fig: dict) -> dict:
    """The agreement with people as flat figures (`human_pairs`, its interval, n pairs and conversations, the
    length baseline, the pairs where the preferred turn is not longer, the agreement at equal length, Spearman, each
    dimension's)."""
    out = {}
    for key, name in (("pairs", "human_pairs"), ("length_baseline", "human_length_baseline"),
                      ("controlled", "human_pairs_controlled"),
                      ("length_baseline_controlled", "human_length_baseline_controlled"),
                      ("spearman", "human_spearman")):
        f = fig[key]
        out.update({name: f["mean"], f"{name}_ci_low": f["ci_low"], f"{name}_ci_high": f["ci_high"], f"{name}_n": f["n"]})
    out.update(equal_length_figures(fig["equal_length"], "human_pairs_equal_length"))
    out["human_pairs_conversations"] = fig["pairs"]["clusters"]
    for d, f in (fig.get("by_dimension") or {}).items():
        out.update({f"human_pairs.{d}": f["pairs"], f"human_spearman.{d}": f["spearman"]})
    return out


def plot_distributions(candidates: list[dict], raw: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(raw)
    fig, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 3.6), squeeze=False)
    for ax, (style, mode) in zip(axes[0], runs):
        by_type: dict[str, list[float]] = {}
        for c, s in zip(candidates, raw[(style, mode)]):
            if s["status"] == "scored":
                label = c["reply_type"] if c["kind"] == "dialogue" else f"qa {c['reply_type']}"
                by_type.setdefault(label, []).append(s["total_reward"])
        labels = sorted(by_type)
        if labels:
            ax.boxplot([by_type[k] for k in labels], showmeans=True)
            ax.set_xticks(range(1, len(labels) + 1), [f"{k}\n(n={len(by_type[k])})" for k in labels], fontsize=7,
                          rotation=20)
        else:  # say why the panel is empty instead of drawing nothing
            unscored = sum(s["status"] != "scored" for s in raw[(style, mode)])
            ax.text(0.5, 3, f"all {unscored} replies unscored\n(see reports/judge_check.json)", ha="center")
        ax.set_title(f"judge total by reply type\n{style} prompt, {mode} mode", fontsize=9)
        ax.set_ylim(1, 5)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def load_human_items(params: Params, path: str) -> list[dict]:
    """The human set's items judge_check scores: at most human.judge_items, whole conversations with a pair,
    held-out conversations first (a reward model is measured on those too, beside the judge)."""
    if not Path(path).exists():
        return []
    items = load_jsonl(path)
    held = {i["conversation_id"] for i in items if is_held_out(i, params.heldout)}
    return human_ratings.select_items(items, params.human.min_gap, params.human.judge_items, held)


def judge_formats(params: Params, block, score_block: str = "score", chosen_style_path: str | None = None
                  ) -> tuple[list[str], list[str]]:
    """(prompt formats, judge modes) the check runs: judge_check measures the formats `auto` chooses between (a
    check that measures none takes the format chosen in `chosen_style_path`, judge_check's figures); a function
    judge (of the units `score_block` rubrics) reads no prompt, so one format and mode say all there is."""
    modes = list(getattr(block, "modes", None) or [params.score.mode])
    if params.score.prompt_style != "auto":
        styles = [params.score.prompt_style]
    elif getattr(block, "prompt_styles", None):  # judge_check measures the formats; the other stages take its choice
        styles = list(block.prompt_styles)
    else:
        if chosen_style_path is None:
            raise ValueError("score.prompt_style is auto and this check measures no format: it needs judge_check's "
                             "figures (chosen_style_path)")
        styles = [resolve_prompt_style(params.score, chosen_style_path)]
    scorer = scorer_for(params, score_block)
    if scorer.kind == "function" and not scorer.dimensions:
        styles, modes = styles[:1], modes[:1]
    return styles, modes


def summarise(report: dict, raw: dict, candidates: list[dict], items: list[dict], styles: list[str],
              modes: list[str], g: Granularity, rubric, judge_model: str, human_items: list[dict] | None
              ) -> tuple[dict, str, list[dict], list[dict]]:
    """The check's figures from its scores: (metrics, the chosen format, the score rows of every run, the human
    items' score rows marked with the chosen run). Takes the report's "human_scores" out of it."""
    chosen = choose_style({s: report["by_prompt_style"][s][modes[0]] for s in styles}, g)
    main_fig = report["by_prompt_style"][chosen][modes[0]]
    metrics = {"judge_model": judge_model, "rubric": rubric.name, "mode": modes[0], "chosen_prompt_style": chosen,
               "items_dialogue": sum(i["kind"] == "dialogue" for i in items),
               "items_qa": sum(i["kind"] == "qa" for i in items),
               **({"items_survey": n} if (n := sum(i["kind"] == "survey" for i in items)) else {}),
               **headline(main_fig, g),
               "by_prompt_style": {f"{s}/{m}": headline(report["by_prompt_style"][s][m], g) for s in styles for m in modes}}
    if human_items:
        metrics.update(human_items=len(human_items), chosen_by="human_pairs")
    if len(modes) == 2:
        agreement = report["by_prompt_style"][chosen]["mode_agreement"]
        metrics.update(mode_agreement_spearman=agreement["total_spearman"],
                       mode_agreement_same_call=agreement["same_call"]["mean"])
    report.update(metrics={k: v for k, v in metrics.items() if k != "by_prompt_style"})
    score_rows = [{**s, "reply_type": c["reply_type"], "prompt_style": style, "mode": mode}
                  for (style, mode), scores in raw.items() for c, s in zip(candidates, scores)]
    human_rows = [{**r, "prompt_style": key.split("/")[0], "mode": key.split("/")[1],
                   "chosen": key == f"{chosen}/{modes[0]}"}
                  for key, records in report.pop("human_scores").items() for r in records]
    return metrics, chosen, score_rows, human_rows


def describe_check(stage: str, metrics: dict, report: dict, items: list[dict], styles: list[str], modes: list[str],
                   g: Granularity, rubric, human_items: list[dict] | None, min_n: int) -> list[str]:
    """What the check found, in words: against people (or the survey), then the gated figures of each run."""
    lines = []
    if human_items:
        lines.append(f"{stage}: against people ({len(human_items)} rated supporter turns; format chosen by it): "
                     + "; ".join(f"{s}/{m}: " + human_ratings.describe_agreement(report["by_prompt_style"][s][m]["human"],
                                                                           min_n)
                                 for s in styles for m in modes))
    elif g.survey_ratings:
        lines.append(f"{stage}: against the seekers' survey of each conversation: " + "; ".join(
            f"{run_key}: {describe_survey(f, min_n=min_n)}" for run_key, f in metrics["by_prompt_style"].items()))
    elif g.human_ratings:
        lines.append(f"{stage}: no human reference set (the human_set stage's items are missing or empty): the judge is measured "
                     "against no people")
    lines.append(f"{stage}: {len(items)} items on the {rubric.name} rubric; prompt format {metrics['chosen_prompt_style']}; "
                 + "; ".join(f"{run_key}: " + ", ".join(f"{g.judge_figure_words.get(name, name)} {f[name]} "
                                                       f"[{f[name + '_ci_low']}, {f[name + '_ci_high']}] (n {f[name + '_n']})"
                                                       for name in g.gated)
                             for run_key, f in metrics["by_prompt_style"].items()))
    return lines


def log_check(params: Params, stage: str, metrics: dict, styles: list[str], modes: list[str], g: Granularity,
              files: dict[str, str]) -> None:
    """The check as an MLflow run of the judge experiment: its reference set as a dataset, its figures per run,
    the report and the plot."""
    import mlflow

    from mascot import registry

    registry.setup_tracking(params)
    exp = registry.experiment_id(params.mlflow.judge_experiment, params.mlflow.artifact_root)
    model, chosen = metrics["judge_model"], metrics["chosen_prompt_style"]
    with mlflow.start_run(experiment_id=exp, run_name=f"{stage.replace('_', '-')}-{Path(model).name}-{chosen}",
                          tags={**registry.git_state(), **registry.dvc_experiment_tags(),
                                "judge_model": model, "rubric": metrics["rubric"],
                                "rubric_aggregate": g.rubric(params).aggregation,
                                "granularity": g.name, "chosen_prompt_style": chosen}):
        registry.log_input_file(files["items"], "eval")
        mlflow.log_params({"judge_model": model, "modes": ",".join(modes), "rubric": metrics["rubric"],
                           "prompt_styles": ",".join(styles), "dialogue_items": metrics["items_dialogue"],
                           "qa_items": metrics["items_qa"], "few_shot": params.score.few_shot})
        for run_key, figs in metrics["by_prompt_style"].items():
            mlflow.log_metrics({f"{run_key.replace('/', '.')}.{k}": v for k, v in figs.items()
                                if isinstance(v, (int, float)) and v is not None})
        mlflow.log_metrics({k: v for k, v in metrics.items() if isinstance(v, (int, float)) and v is not None})
        mlflow.log_artifact(files["report"])
        mlflow.log_artifact(files["plot"])


