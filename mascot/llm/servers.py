"""The servers `mascot serve` started on this machine, with the build each runs: the serve command writes the
record, the OpenAI-compatible client reads it (to leave seeds off for the CPU build, whose /version does not say
it is one)."""
from __future__ import annotations

import json
import os
from pathlib import Path

SERVERS_FILE = Path(os.environ.get("MASCOT_SERVERS_FILE", Path.home() / ".cache/mascot/servers.json"))


def _servers() -> dict:
    try:
        return json.loads(SERVERS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def record_server(base_url: str, device: str | None, pid: int | None = None) -> None:
    servers = _servers()
    if device is None:
        servers.pop(base_url, None)
    else:
        servers[base_url] = {"device": device, "pid": pid or os.getpid()}
    SERVERS_FILE.parent.mkdir(parents=True, exist_ok=True)
    SERVERS_FILE.write_text(json.dumps(servers, indent=2))


def server_device(base_url: str) -> str | None:
    """"cpu" or "gpu" for a server `mascot serve` started on this machine and that still runs, else None."""
    entry = _servers().get(base_url.rstrip("/"), {})
    try:
        pid = int(entry["pid"])
        if pid <= 0:
            return None
        os.kill(pid, 0)
    except (KeyError, OSError, ValueError, TypeError):
        return None  # gone (or never recorded): a stale record says nothing about what answers there now
    return entry.get("device")
