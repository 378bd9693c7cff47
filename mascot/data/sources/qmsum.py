"""QMSum (Yale-LILY/QMSum): one meeting per JSONL line, queried by topic or question.

Transcripts run to hundreds of turns; each query becomes one dialogue whose single user message holds a
window of the transcript around the query's `relevant_text_span`, cut to the token budget later by
`queries.py`, followed by the question.
"""
from __future__ import annotations

from pathlib import Path

from mascot.data.dialogue import Dialogue, Turn
from mascot.io import BadRows, InputError, read_jsonl, require

PRODUCT_ROLES = ("Project Manager", "Marketing", "User Interface", "Industrial Designer")
ACADEMIC_ROLES = ("Professor", "PhD", "Grad", "Postdoc", "Undergrad")


def meeting_domain(transcript: list[dict]) -> str:
    """QMSum mixes AMI product meetings, ICSI academic meetings and committee hearings; speakers tell which."""
    speakers = " ".join(str(t.get("speaker", "")) for t in transcript[:50])
    if any(r in speakers for r in PRODUCT_ROLES):
        return "product"
    if any(r in speakers for r in ACADEMIC_ROLES):
        return "academic"
    return "committee"


def _span_turns(spans: list, where: str, n_turns: int) -> list[int]:
    """Turn indices a query is about; spans are [start, end] pairs of index strings (inclusive)."""
    indices: list[int] = []
    for span in spans:
        try:
            start, end = int(span[0]), int(span[1])
        except (TypeError, ValueError, IndexError):
            raise InputError(f"{where}: relevant_text_span {span!r} is not a pair of turn indices") from None
        indices.extend(range(max(start, 0), min(end, n_turns - 1) + 1))
    return indices


def load_qmsum(path: str | Path, bad: BadRows) -> list[Dialogue]:
    dialogues = []
    for lineno, meeting in read_jsonl(path, bad):
        where = f"{path}:{lineno}"
        with bad.guard():
            transcript = require(meeting, "meeting_transcripts", list, where)
            if not transcript:
                raise InputError(f"{where}: empty meeting_transcripts")
            turns = []
            for j, t in enumerate(transcript):
                tw = f"{where} meeting_transcripts[{j}]"
                turns.append(Turn("meeting", " ".join(require(t, "content", str, tw).split()),
                                  require(t, "speaker", str, tw)))
            domain = meeting_domain(transcript)
            questions = [(q, "specific") for q in meeting.get("specific_query_list", [])]
            questions += [(q, "general") for q in meeting.get("general_query_list", [])]
            for k, (q, kind) in enumerate(questions):
                qw = f"{where} {kind}_query_list"
                query = require(q, "query", str, qw)
                focus = _span_turns(q.get("relevant_text_span", []), qw, len(turns)) if kind == "specific" else []
                dialogues.append(Dialogue(
                    id=f"qmsum-{lineno}-{k}", source="qmsum",
                    turns=[Turn("user", query)],
                    # the meeting is the conversation: its questions share one transcript (mascot/splits.py)
                    metadata={"conversation_id": f"qmsum-{lineno}", "meeting_domain": domain, "query_kind": kind,
                              "meeting_line": lineno,
                              "transcript": turns, "focus_turns": focus,
                              "answer": " ".join(str(q.get("answer") or "").split()) or None}))
    return dialogues
