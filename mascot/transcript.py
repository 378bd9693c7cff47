"""The one way a conversation is written out as text: the judge's items, the reward model's inputs, the
Director's and the speakers' transcripts and the episode reports all call `render`."""
from __future__ import annotations

USER = "Person"


def render(messages: list[dict], assistant: str = "Companion") -> str:
    """One line per message, `Speaker: text`. A user message is the Person's; an assistant message carries its
    speaker in `name` (a group turn) or is `assistant`'s."""
    return "\n".join(f"{USER if m['role'] == 'user' else m.get('name') or assistant}: {m['content']}"
                     for m in messages)


def turn_messages(turns: list[dict]) -> list[dict]:
    """Episode turns ({role: agent|user, speaker, text}) as messages, the speaker in `name`."""
    return [{"role": "user", "content": t["text"]} if t["role"] == "user"
            else {"role": "assistant", "name": t["speaker"], "content": t["text"]} for t in turns]
