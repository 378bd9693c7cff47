"""MLflow: tracking set-up, lineage tags, registering adapter versions, aliases and the promotion gate.

MLflow 3 notes that shaped this: the file store refuses to start (sqlite instead); `register_model` on a
plain folder fails and leaves an empty model behind, so versions are created from the run's artifact URI
with `create_model_version`; experiments get an explicit artifact location.
"""
from __future__ import annotations

from dataclasses import dataclass
import fcntl
import hashlib
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import time
import warnings

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from mascot.config import Params
from mascot.io import InputError, load_jsonl, read_json
from mascot.stats import TOO_FEW


def experiment_origin(cwd: Path | None = None) -> Path | None:
    """The repository a queued or `--temp` DVC experiment was started from, when this process runs in one: DVC
    runs such an experiment in a copy under `<repo>/.dvc/tmp/exps/`, deleted when it ends. None elsewhere."""
    parts = (cwd or Path.cwd()).resolve().parts
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return None


def store_path(path: str | Path) -> Path:
    """A path of the embedded store (`mlflow.db`, `mlartifacts/`) as the repository's: inside a queued or `--temp`
    experiment, the repository it was queued from, so that what it tracks outlives its temporary copy."""
    path = Path(path)
    return path if path.is_absolute() else (experiment_origin() or Path.cwd()).resolve() / path


def embedded_uri(uri: str) -> str:
    """`sqlite:///relative.db` as the repository's database (store_path); any other URI as it is."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str(store_path(uri[len(prefix):]))
    return uri


_STORE_LOCK = None  # the open file whose lock this process holds on the embedded store (released at exit)


def lock_embedded_store(uri: str) -> None:
    """Inside queued experiments, one stage process at a time writes to the repository's embedded SQLite store:
    `dvc queue start -j 2` runs two experiments' stages at once, SQLite with MLflow's connection pool fails under
    concurrent writers ("database is locked"), and a registry decision (promote) must not interleave with another.
    A second process waits here until the first ends, and says so; a team server (`mascot stack up`) takes
    concurrent writers instead. Outside a queued experiment there is one process at a time anyway: no lock."""
    global _STORE_LOCK

    if _STORE_LOCK is not None or not uri.startswith("sqlite:///") or experiment_origin() is None:
        return
    lock_path = Path(uri[len("sqlite:///"):]).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fh = lock_path.open("a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"mlflow: the embedded store {uri} is in use by another stage (another queued experiment); waiting "
              "for it: the embedded store takes one writer at a time, a team server several (`mascot stack up`)",
              file=sys.stderr, flush=True)
        fcntl.flock(fh, fcntl.LOCK_EX)
    _STORE_LOCK = fh


def setup_tracking(params: Params) -> str:
    """Point MLflow at the environment's server if set, else the embedded sqlite store of params (the repository's,
    also from a queued experiment's temporary copy; one stage process at a time)."""
    uri = embedded_uri(os.environ.get("MLFLOW_TRACKING_URI") or params.mlflow.tracking_uri)
    lock_embedded_store(uri)
    mlflow.set_tracking_uri(uri)
    # The registry lives with the runs. (Not MLFLOW_REGISTRY_URI: MLflow itself exports it on
    # set_registry_uri, so in a long-lived process it would keep pointing at an earlier store.)
    mlflow.set_registry_uri(uri)
    return uri


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://", "databricks"))


def experiment_id(name: str, artifact_root: str) -> str:
    """The experiment's id, created if missing. With a local store its artifacts go under `artifact_root`; against
    a tracking server they go to the server's own root (with `--serve-artifacts`, its object store): a local
    `file://` location would make each client write artifacts to its own disk, where no colleague can read them."""
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        if is_server(mlflow.get_tracking_uri()) and exp.artifact_location.startswith("file:"):
            raise RuntimeError(f"experiment '{name}' on {mlflow.get_tracking_uri()} keeps its artifacts at "
                               f"{exp.artifact_location}, on one client's disk; rename or delete it on the server "
                               "so that it is recreated under the server's artifact root")
        return exp.experiment_id
    if is_server(mlflow.get_tracking_uri()):
        return mlflow.create_experiment(name)
    location = store_path(artifact_root) / name
    return mlflow.create_experiment(name, artifact_location=location.as_uri())


def file_md5(path: str | Path) -> str:
    """The same md5 DVC records for a file out, so a run can be matched to `dvc.lock`."""
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_state() -> dict[str, str]:
    def git(*args) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"git_commit": commit, "git_dirty": str(dirty).lower()}


def lineage_tags(pairs_path: str | Path, base_model: str, template_hash: str) -> dict[str, str]:
    return {**git_state(), "pairs_md5": file_md5(pairs_path), "pairs_path": str(pairs_path),
            "base_model": base_model, "reward_template_hash": template_hash, **base_model_tags(base_model)}


def base_model_tags(folder: str | Path) -> dict[str, str]:
    """Where a base model folder came from (the `base_model` stage's mascot_source.json): a hub model's repo and
    the commit its revision resolved to, so a run says which weights it trained on."""
    try:
        source = json.loads((Path(folder) / "mascot_source.json").read_text())
    except (OSError, ValueError):
        return {}
    return {f"base_model_{k}": str(v) for k, v in source.items() if k in ("source", "repo", "revision", "commit",
                                                                           "sha256")}


REGISTRATION_TAG = "mascot_registration"


def mark_complete(name: str, version: str) -> None:
    MlflowClient().set_model_version_tag(name, version, REGISTRATION_TAG, "complete")


def abandon_incomplete(name: str) -> list[str]:
    """Versions left "incomplete" by a crashed run: tag them abandoned so that nothing ever promotes them."""
    client = MlflowClient()
    try:
        versions = client.search_model_versions(f"name='{name}'")
    except MlflowException:
        return []
    abandoned = []
    for mv in versions:
        if mv.tags.get(REGISTRATION_TAG) == "incomplete":
            client.set_model_version_tag(name, mv.version, REGISTRATION_TAG, "abandoned")
            abandoned.append(str(mv.version))
    return abandoned


def registration_state(name: str, version: str) -> str:
    return MlflowClient().get_model_version(name, version).tags.get(REGISTRATION_TAG, "complete")


@dataclass(frozen=True)
class Version:
    name: str
    version: str
    run_id: str


def register_version(name: str, run_id: str, artifact_path: str, tags: dict[str, str],
                     description: str = "") -> Version:
    client = MlflowClient()
    try:
        client.create_registered_model(name, description=description)
    except MlflowException as exc:
        if "already exists" not in str(exc).lower() and "RESOURCE_ALREADY_EXISTS" not in str(exc):
            raise
    source = f"{client.get_run(run_id).info.artifact_uri}/{artifact_path}"
    # "incomplete" until the stage that registers it has finished: a crash in between leaves a version that
    # promotion refuses and the next run marks abandoned, never a champion.
    mv = client.create_model_version(name, source=source, run_id=run_id,
                                     tags={**{k: str(v) for k, v in tags.items()}, REGISTRATION_TAG: "incomplete"})
    for _ in range(60):
        if client.get_model_version(name, mv.version).status == "READY":
            break
        time.sleep(0.5)
    return Version(name, str(mv.version), run_id)


def alias_version(name: str, alias: str) -> str | None:
    try:
        return str(MlflowClient().get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def point_verdict(point: float, low: float | None, high: float | None, bar: float, n: int | None,
                  min_n: int | None, strict: bool = False) -> str:
    """A point estimate against a bar, told only where its interval can tell: "pass", "fail", or TOO_FEW when
    it rests on fewer than `min_n` items or its 95% interval holds the bar (the interval above it passes, below
    it fails). `strict`: passing needs the figure above the bar (a baseline to beat), not at it (a threshold).
    Without an interval (a figure given bare), the point decides."""
    if min_n is not None and n is not None and n < min_n:
        return TOO_FEW
    if low is None or high is None:
        return "pass" if (point > bar if strict else point >= bar) else "fail"
    if (low > bar) if strict else (low >= bar):
        return "pass"
    if (high <= bar) if strict else (high < bar):
        return "fail"
    return TOO_FEW


def decide_promotion(new: dict, champion: dict | None, min_accuracy: float,
                     beat_length_baseline: bool = False, bar_on: str = "point",
                     min_n: int | None = None) -> tuple[bool, str]:
    """(promoted, reason): `gate_decision` without what it could not tell."""
    promoted, reason, _ = gate_decision(new, champion, min_accuracy, beat_length_baseline, bar_on, min_n)
    return promoted, reason


def gate_decision(new: dict, champion: dict | None, min_accuracy: float, beat_length_baseline: bool = False,
                  bar_on: str = "point", min_n: int | None = None) -> tuple[bool, str, list[str]]:
    """The gate on eval pairs: accuracy at least `min_accuracy`, above the "longer reply wins" baseline (if
    asked), and not worse than the current champion on the same pairs (accuracy first; on a tie, the mean
    margin decides). `new`/`champion` hold `accuracy` and `mean_margin` (and `length_baseline_accuracy`, and
    the interval `accuracy_ci_low`/`accuracy_ci_high` over `pairs`).

    `bar_on: lower_bound` holds the interval's lower bound to the bar and the baseline, and below `min_n` pairs
    refuses (too few to tell). `point` decides only where the figure can tell (`point_verdict`): an accuracy on
    fewer than `min_n` pairs, or whose interval holds the bar or the baseline, is "too few to tell", and the
    version is promoted with those words in the reason (on the CPU default's 6-10 judge pairs a coin's toss
    decided, the same way on every run of one machine and differently on another, and stopped `dvc repro` there);
    a figure whose interval lies below the bar is refused."""
    acc = new.get("accuracy")
    if acc is None:
        return False, "no eval pairs to measure accuracy on", []
    n, low, high = new.get("pairs"), new.get("accuracy_ci_low"), new.get("accuracy_ci_high")
    few = min_n is not None and n is not None and n < min_n
    shown = f"{acc:.4f} [{low}, {high}] on {n} pairs" if n else f"{acc:.4f}"
    untold: list[str] = []  # what the figures could not tell, said in the reason
    if bar_on == "lower_bound":
        if few:
            return False, (f"eval accuracy {shown}: too few to tell (n {n} < stats.min_n {min_n}); "
                           "promote.bar_on: lower_bound promotes only on an interval: raise pairs.eval_fraction or "
                           "add queries"), [f"the threshold {min_accuracy:.4f}"]
        acc, where = (low if low is not None else 0.0), "lower bound "
        verdict = "pass" if acc >= min_accuracy else "fail"
    else:
        where = ""
        verdict = point_verdict(acc, low, high, min_accuracy, n, min_n)
    if verdict == "fail":
        return False, f"eval accuracy {where}{acc:.4f} ({shown}) is below the threshold {min_accuracy:.4f}" + (
            ", its whole interval too" if bar_on == "point" and low is not None and not few else ""), untold
    if verdict == TOO_FEW:
        untold.append(f"the threshold {min_accuracy:.4f}")
    baseline = new.get("length_baseline_accuracy")
    beats = ""
    if beat_length_baseline and baseline is not None:
        told = ("pass" if acc > baseline else "fail") if bar_on == "lower_bound" else \
            point_verdict(acc, low, high, baseline, n, min_n, strict=True)
        if told == "pass":
            beats = f", above the longer-reply-wins baseline {baseline:.4f}"
        elif told == TOO_FEW:
            beats = (f", {'above' if acc > baseline else 'not above'} the longer-reply-wins baseline {baseline:.4f} by "
                     "its point estimate")
            untold.append("the longer-reply-wins baseline (whether it learned length)")
        else:
            return False, (f"eval accuracy {where}{acc:.4f} ({shown}) does not beat the longer-reply-wins baseline "
                           f"{baseline:.4f} on the same pairs: the model may have learned length, not the rubric"), untold
    few_words = ""
    if untold:
        why = f"n {n} < stats.min_n {min_n}" if few else f"its interval holds {'them' if len(untold) > 1 else 'it'}"
        few_words = f"; promoted, {TOO_FEW} against {' and '.join(untold)} ({why}; promote.bar_on: point)"
    acc_words = f"eval accuracy {where}{acc:.4f} ({shown})" if n else f"eval accuracy {acc:.4f}"
    relation = ">=" if verdict == "pass" else "vs"
    if champion is None:
        return True, f"{acc_words} {relation} threshold {min_accuracy:.4f}{beats}; no champion yet{few_words}", untold
    c_acc, point = champion["accuracy"], new["accuracy"]  # on the same pairs: point against point
    if point < c_acc:
        # point against point decides (the champion stays); where the interval holds the champion's figure, said
        told = point_verdict(point, new.get("accuracy_ci_low"), new.get("accuracy_ci_high"), c_acc, n, min_n)
        return False, (f"eval accuracy {point:.4f} is worse than the champion's {c_acc:.4f} on the same eval pairs"
                       + (f" ({TOO_FEW} on {n} pairs: the champion stays)" if told == TOO_FEW else "")), untold
    if point == c_acc and new["mean_margin"] < champion["mean_margin"]:
        return False, (f"eval accuracy ties the champion's ({point:.4f}) and its mean margin "
                       f"{new['mean_margin']:.4f} is below the champion's {champion['mean_margin']:.4f}"), untold
    return True, (f"{acc_words} {relation} threshold {min_accuracy:.4f}{beats} and not worse than the champion "
                  f"({c_acc:.4f}, margin {champion['mean_margin']:.4f}){few_words}"), untold


def set_alias(name: str, alias: str, version: str, reason: str, figures: dict[str, object]) -> None:
    """Move `alias` to `version`, recording why and with which figures as version tags."""
    MlflowClient().set_registered_model_alias(name, alias, version)
    tag_decision(name, version, alias, reason, figures)


def tag_decision(name: str, version: str, prefix: str, reason: str, figures: dict[str, object]) -> None:
    """Record a decision on `version` as tags `<prefix>_since`, `<prefix>_reason` and `<prefix>_<figure>`."""
    client = MlflowClient()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    client.set_model_version_tag(name, version, f"{prefix}_since", stamp)
    client.set_model_version_tag(name, version, f"{prefix}_reason", reason)
    for key, value in figures.items():
        client.set_model_version_tag(name, version, f"{prefix}_{key}", str(value))


def version_digest(name: str, version) -> str:
    """The identity of one registered version: its name, number, run and artifact source. A registry wiped and
    refilled (a new v1 from another run) gives another digest."""
    mv = MlflowClient().get_model_version(name, str(version))
    return hashlib.sha256(f"{name}|{mv.version}|{mv.run_id}|{mv.source}".encode()).hexdigest()[:16]


def experiment_alias(experiment: str) -> str:
    """The registry alias that holds what a DVC experiment's gate promoted: `exp-<name>` (MLflow allows letters,
    digits, `_` and `-` in an alias)."""
    return "exp-" + re.sub(r"[^\w-]", "-", experiment)


def current_experiment() -> str | None:
    """The DVC experiment this stage runs in (`dvc exp run`, queued, `--temp` or in the workspace: DVC puts its
    name in every stage's environment), or None for a plain `dvc repro`."""
    return os.environ.get("DVC_EXP_NAME") or None


def check_recorded_champion(name: str, alias: str, decision_path: str | Path, stage: str,
                            promote_stage: str) -> tuple[str, str]:
    """(version, alias) of the reward model the promotion stage decided and recorded (its DVC output; a hand move
    through `mascot promote --version` is written there too), after checking the alias still resolves to it: an
    alias moved outside the pipeline (the registry's UI or API), or a promote output restored from DVC's run
    cache without the registry side effect, is refused with what to run. The alias is the one the decision
    names: `alias` (the team's champion), or inside a DVC experiment the experiment's own (`exp-<name>`) when its
    gate promoted its version."""
    decision = read_json(decision_path, f"{stage} needs the {promote_stage} stage's decision: run it first")
    alias = decision.get("champion_alias") or alias
    recorded, digest = decision.get("champion_version"), decision.get("champion_digest")
    current = alias_version(name, alias)
    if recorded is None:
        version = decision.get("version", "N")
        raise InputError(f"{stage}: {promote_stage} promoted no version of {name} to @{alias} ({decision_path}: "
                         f"{decision.get('reason')}); improve the reward model and run `dvc repro` again, or promote "
                         f"it by hand: `mascot promote --model {name} --version {version} --alias {alias} --reason "
                         f"'...'`, then `dvc repro`")
    moved = current is None or str(current) != str(recorded)
    if not moved and digest and version_digest(name, current) != digest:
        moved = True
    if moved:
        adopt = (f"`mascot promote --model {name} --version {current} --alias {alias} --reason '...'`, then `dvc repro`"
                 if current is not None else "")
        raise InputError(f"{stage}: models:/{name}@{alias} now resolves to version {current}, but {promote_stage} "
                         f"recorded version {recorded} ({decision_path}): the alias was moved outside the pipeline "
                         f"(the registry's UI or API; a move by mascot promote is recorded), or a restored "
                         f"run cache skipped its move. Let the gate decide again: `dvc repro --force --single-item "
                         f"{promote_stage}`, then `dvc repro`"
                         + (f"; or keep version {current}, recorded as a hand move: {adopt}" if adopt else ""))
    return str(current), alias


def decision_tags(decision_path: str | Path) -> dict[str, str]:
    """How the champion a stage trains or evaluates against was chosen, from the gate's decision record, as run
    tags: by the gate (and whether on too few to tell), or by hand (with its reason)."""
    decision = read_json(decision_path)
    if decision.get("by_hand"):
        how = "by hand"
    else:
        how = f"gate ({TOO_FEW})" if decision.get("too_few_to_tell") else "gate"
    return {"reward_model_decision": how, "reward_model_decision_reason": str(decision.get("reason"))[:4000]}


def dvc_experiment_tags() -> dict[str, str]:
    """Inside `dvc exp run`, the experiment's name and baseline commit (DVC puts them in the stage's
    environment), so MLflow's runs page can group and filter runs by experiment; outside, nothing."""
    name, baseline = os.environ.get("DVC_EXP_NAME"), os.environ.get("DVC_EXP_BASELINE_REV")
    return {k: v for k, v in (("dvc_exp_name", name), ("dvc_exp_baseline_rev", baseline)) if v}


def log_input_file(path: str | Path, context: str) -> None:
    """Log a JSONL input (pairs, episodes, queries) as an MLflow dataset of the active run: its scalar columns as
    the schema, its md5 as the digest (the value dvc.lock records for it: DVC 3 hashes a file's bytes), `context`
    train or eval, so the runs page's Dataset column says which data a run saw."""
    import mlflow
    import pandas as pd

    rows = load_jsonl(path)
    df = pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (list, dict))} for r in rows])
    # a local path matches two registered source kinds (both the local one), and a column with gaps makes
    # MLflow warn about integer schemas: neither concerns a dataset logged for lineage
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = mlflow.data.from_pandas(df, source=str(Path(path).resolve()), name=str(path), digest=file_md5(path))
    mlflow.log_input(dataset, context=context)
