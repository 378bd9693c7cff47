"""Reward functions for GRPO: the registered reward model (through the one reward prompt function) and a
format reward. Both read the persona and the dialogue from the dataset's own columns."""
from __future__ import annotations

import json
import re

import numpy as np

from mascot.granularity import persona_fields


def first_line(completion: str) -> str:
    """Speaker replies are one line: a base model keeps writing the next turns after it."""
    return completion.strip().split("\n", 1)[0].strip()


def reply_text(completion) -> str:
    """The reply a completion holds: a chat completion (a list of messages) is the assistant's whole message;
    a plain-text completion (transcript prompt) is its first line."""
    if isinstance(completion, list):
        return " ".join(m.get("content", "") for m in completion if m.get("role") == "assistant").strip()
    return first_line(completion)


def format_score(completion, persona_name: str) -> float:
    """1.0 for a clean reply of 3-60 words that neither plays the user nor names itself (one line, for
    transcript prompts)."""
    if isinstance(completion, list):
        line = reply_text(completion)
        words = len(line.split())
        return float(3 <= words <= 60 and not re.match(r"^(Person|User)\s*:", line)
                     and persona_name.lower() + ":" not in line.lower())
    line = first_line(completion)
    words = len(line.split())
    if not 3 <= words <= 60:
        return 0.0
    if re.match(r"^(Person|User)\s*:", line) or persona_name.lower() + ":" in line.lower():
        return 0.0
    return 1.0 if "\n" not in completion.strip() or completion.strip().split("\n", 1)[1].strip() == "" else 0.5


def make_reward_model_reward(scorer, personas: dict):
    def reward_model(prompts, completions, persona, context, **_) -> list[float]:
        items = [(persona_fields(personas[p]), json.loads(c), reply_text(done))
                 for p, c, done in zip(persona, context, completions)]
        return scorer.score(items)
    return reward_model


def was_cut(completion, ids, stop_ids) -> bool:
    """The generation hit its token budget before the reply ended: its last token is no stop token, and
    (transcript prompts) the first line, which is the reply, has not ended either."""
    if not ids or ids[-1] in stop_ids:
        return False
    return isinstance(completion, list) or "\n" not in completion.strip()


def make_format_reward(stop_ids):
    """The format reward; a reply cut at the budget gets 0, so that format never pays running to the limit.
    `stop_ids`: the token ids that end a generation (the tokenizer's EOS and pad, the generation config's EOS)."""
    stop_ids = set(stop_ids)

    def format_reward(prompts, completions, persona, completion_ids, **_) -> list[float]:
        return [0.0 if was_cut(c, ids, stop_ids) else format_score(c, p)
                for c, p, ids in zip(completions, persona, completion_ids)]
    return format_reward


def stop_token_ids(model_dir: str) -> set[int]:
    """The ids that end a generation of the model in `model_dir` (TRL's own test for a truncated completion)."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = {tok.eos_token_id, tok.pad_token_id}
    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:  # no generation_config.json
        eos = None
    ids.update(eos if isinstance(eos, list) else [eos])
    return {i for i in ids if i is not None}


class LengthCalibration:
    """A post-hoc length calibration of a reward (Huang et al., ICLR 2025): a smooth fit of the score on the reply's
    words, made on the base policy's own samples before any update, is subtracted from every score GRPO sees, so
    a reply's length no longer buys what it bought the base policy. `bias(w)` is the fit at w minus the fit at the
    base policy's mean length (the reward keeps its level); outside the lengths fitted on, a curve (degree > 1) is
    held at its end values and a line is extended (a policy cannot reach a length the fit never saw and be paid
    by a polynomial's tail). Unless `pay_shorter`, a reply shorter than that mean is not credited anything: the
    bias is held at 0 below it, so that a reply's missing words never pay (a reward model that scores some short
    reply far above the line, credited the slope for each missing word, pays GRPO to collapse to it).

    It only ever takes pay off length: where the base policy's score does not rise with words (its linear slope
    not above 0 at `max_p`, one-sided), the calibration is inactive and says why. (A fit of a slope that is noise,
    -0.023 a word at R^2 0.065 in the second evidence run, subtracted, paid GRPO +0.023 for each word.)"""

    def __init__(self, words: list[float], scores: list[float], degree: int = 1, max_p: float = 0.05,
                 pay_shorter: bool = False):
        w, s = np.asarray(words, dtype=float), np.asarray(scores, dtype=float)
        if len(w) < degree + 2 or np.ptp(w) == 0:
            raise ValueError(f"a length calibration of degree {degree} needs at least {degree + 2} samples of "
                             f"different lengths; the base policy gave {len(w)} (lengths {sorted(set(w.tolist()))}): "
                             "raise length_calibration.samples or max_completion_length")
        self.degree, self.n, self.pay_shorter = degree, len(w), pay_shorter
        self.coefficients = np.polyfit(w, s, degree)
        self.low, self.high, self.reference = float(w.min()), float(w.max()), float(w.mean())
        fitted = np.polyval(self.coefficients, w)
        resid, total = float(((s - fitted) ** 2).sum()), float(((s - s.mean()) ** 2).sum())
        self.r2 = 1.0 - resid / total if total > 0 else 0.0
        from scipy.stats import linregress

        trend = linregress(w, s, alternative="greater") if total > 0 else None
        self.trend_p = float(trend.pvalue) if trend is not None else 1.0
        self.active = self.trend_p <= max_p

    def bias(self, words: float) -> float:
        if not self.active:
            return 0.0
        w = float(words) if self.degree == 1 else min(max(float(words), self.low), self.high)
        if not self.pay_shorter and w < self.reference:
            return 0.0
        return float(np.polyval(self.coefficients, w) - np.polyval(self.coefficients, self.reference))

    def adjust(self, scores: list[float], words: list[float]) -> list[float]:
        return [s - self.bias(w) for s, w in zip(scores, words)]

    def figures(self) -> dict:
        """What the fit found, for the metrics file and MLflow: the score a word bought the base policy (the
        slope at its mean length), the fit's R^2, how many samples and what lengths it rests on."""
        slope = float(np.polyval(np.polyder(self.coefficients), self.reference))
        return {"length_calibration_active": self.active, "length_calibration_trend_p": round(self.trend_p, 4),
                "length_calibration_slope_per_word": round(slope, 6), "length_calibration_r2": round(self.r2, 4),
                "length_calibration_samples": self.n, "length_calibration_degree": self.degree,
                "length_calibration_words_min": self.low, "length_calibration_words_max": self.high,
                "length_calibration_words_mean": round(self.reference, 2),
                "length_calibration_pays_shorter": self.pay_shorter}


def reply_words(completions) -> list[int]:
    """Each completion's reply in words: the unit every length lever here fits and removes."""
    return [len(reply_text(c).split()) for c in completions]


class LengthCalibrated:
    """`reward` (a TRL reward function over completions) with the calibration's length bias taken off each score;
    the same name, so its curves keep their keys."""

    def __init__(self, reward, calibration: LengthCalibration):
        self.reward, self.calibration = reward, calibration
        self.__name__ = getattr(reward, "__name__", "reward_model")

    def __call__(self, prompts, completions, **columns) -> list[float]:
        raw = self.reward(prompts=prompts, completions=completions, **columns)
        return self.calibration.adjust(raw, reply_words(completions))

    def figures(self) -> dict:
        return self.calibration.figures()


def within_group_length_removed(scores: list[float], words: list[float], groups: list[list[int]]) -> tuple[list[float], list[float]]:
    """Each group's (one prompt's completions) least-squares slope of score on words taken off its scores about the
    group's mean length: within a group the adjusted scores no longer rise with length, so GRPO's group-relative
    advantage cannot pay a longer reply for its words, whatever shape the reward model's taste for length has
    outside the lengths the base policy wrote. The group's mean score is kept. Returns the scores and each group's
    slope (groups of fewer than 3 or of one length are left as they are)."""
    out, slopes = [float(s) for s in scores], []
    for idx in groups:
        w = np.asarray([words[i] for i in idx], dtype=float)
        if len(idx) < 3 or np.ptp(w) == 0:
            continue
        s = np.asarray([scores[i] for i in idx], dtype=float)
        slope = float(((w - w.mean()) * (s - s.mean())).sum() / ((w - w.mean()) ** 2).sum())
        slopes.append(slope)
        for i, wi in zip(idx, w):
            out[i] = float(scores[i]) - slope * (wi - w.mean())
    return out, slopes


class WithinGroupLength:
    """`reward` (a TRL reward function) with each prompt group's length slope removed (within_group_length_removed);
    the slopes it removed are kept for the stage's figures. Completions of one prompt form a group (TRL repeats a
    prompt num_generations times in a batch)."""

    def __init__(self, reward):
        self.reward, self.slopes = reward, []
        self.__name__ = getattr(reward, "__name__", "reward_model")

    def __call__(self, prompts, completions, **columns) -> list[float]:
        raw = self.reward(prompts=prompts, completions=completions, **columns)
        keyed: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts):
            keyed.setdefault(prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True), []).append(i)
        adjusted, slopes = within_group_length_removed(raw, reply_words(completions), list(keyed.values()))
        self.slopes.extend(slopes)
        return adjusted

    def figures(self) -> dict:
        """The reward model's pay per word inside a group, as GRPO would have seen it: mean over the groups and
        over the first and last quarter of them (a slope that grows is a policy moving where length pays)."""
        s, q = self.slopes, max(1, len(self.slopes) // 4)
        mean = (lambda xs: round(float(np.mean(xs)), 6) if xs else None)
        return {"length_within_group_groups": len(s), "length_within_group_slope_per_word": mean(s),
                "length_within_group_slope_first_quarter": mean(s[:q]),
                "length_within_group_slope_last_quarter": mean(s[-q:])}
