"""A stand-in for vLLM's OpenAI-compatible server, for unit and fault-injection tests of the client."""
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class StandIn(BaseHTTPRequestHandler):
    """Answers like vLLM's OpenAI server, or fails on purpose: the first `fail_first` requests get 503,
    requests past `ok_budget` get `fault` ("503", "stall": no answer for `stall_s`, "garbage": 200 with a
    body that is not JSON)."""

    bodies: list = []
    fail_first: int = 0
    ok_budget: int | None = None
    fault: str = "503"
    stall_s: float = 5.0
    chat_prefix: str = ""  # e.g. a <think>...</think> block, as a reasoning model writes before its answer
    json_reply: str | None = None  # the text of every completion (e.g. a judge that always answers the same)
    chars_per_token: int | None = None  # with json_reply: a reply longer than max_tokens x this is cut ("length")

    def log_message(self, *args):
        pass

    served_root: str = "/weights/m"  # what GET /v1/models reports the served name stands for (vLLM: `root`)

    def do_GET(self):
        if not self.path.endswith("/models"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "root": type(self).served_root}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls.bodies.append((self.path, body))
        failing = cls.fail_first > 0 or (cls.ok_budget is not None and len(cls.bodies) > cls.ok_budget)
        if cls.fail_first > 0:
            cls.fail_first -= 1
        if failing:
            if cls.fault == "stall":
                time.sleep(cls.stall_s)
            if cls.fault == "garbage":
                data = b"<html>proxy error</html>"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        usage = {"prompt_tokens": 5, "completion_tokens": 3 * body.get("n", 1), "total_tokens": 8}
        if body.get("logprobs"):
            top = {"1": math.log(0.1), "2": math.log(0.2), "3": math.log(0.4), "4": math.log(0.2), "5": math.log(0.1)}
            choice = {"index": 0, "text": "3", "finish_reason": "length",
                      "logprobs": {"tokens": ["3"], "token_logprobs": [math.log(0.4)], "top_logprobs": [top],
                                   "text_offset": [0]}}
            resp = {"id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                    "choices": [choice], "usage": usage}
        elif self.path.endswith("/chat/completions"):
            choices = []
            for i in range(body.get("n", 1)):
                text, finish = self._budgeted(body, f"{cls.chat_prefix} reply {i} ")
                choices.append({"index": i, "finish_reason": finish, "message": {"role": "assistant", "content": text}})
            resp = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "usage": usage,
                    "choices": choices}
        else:
            text, finish = self._budgeted(body, " text")
            resp = {"id": "x", "object": "text_completion", "created": 0, "model": body["model"], "usage": usage,
                    "choices": [{"index": i, "text": text, "finish_reason": finish, "logprobs": None}
                                for i in range(body.get("n", 1))]}
        data = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


    def _budgeted(self, body: dict, default: str) -> tuple[str, str]:
        cls = type(self)
        if cls.json_reply is None:
            return default, "stop"
        limit = body.get("max_tokens", 10**9) * (cls.chars_per_token or 10**9)
        return (cls.json_reply[:limit], "length") if len(cls.json_reply) > limit else (cls.json_reply, "stop")


class StandInServer(ThreadingHTTPServer):
    # a listen backlog of 5 (the default) refuses connections when a loaded machine accepts slowly: the client
    # would see a refused connection where the test means a 503
    request_queue_size = 256


@pytest.fixture
def server():
    StandIn.bodies, StandIn.fail_first, StandIn.ok_budget, StandIn.fault = [], 0, None, "503"
    StandIn.chat_prefix, StandIn.json_reply, StandIn.chars_per_token = "", None, None
    StandIn.served_root = "/weights/m"
    httpd = StandInServer(("127.0.0.1", 0), StandIn)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


class StandInHub(BaseHTTPRequestHandler):
    """A stand-in for a Hugging Face hub (huggingface_hub honours HF_ENDPOINT): one repository whose files are a
    local folder's, at one commit, reachable by that commit and by the tags in `refs`. Answers what
    `HfApi.model_info` and `snapshot_download` ask: /api/models/<repo>/revision/<rev>, /api/models/<repo>/tree/<sha>
    and /<repo>/resolve/<sha>/<file>."""

    repo: str = "org/tiny-chat"
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    refs: tuple = ("v1.0", "main")
    folder = None  # pathlib.Path of the files
    requests: list = []

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _files(self):
        return sorted(p for p in type(self).folder.rglob("*") if p.is_file())

    def do_GET(self):
        import hashlib

        cls = type(self)
        path = self.path.split("?", 1)[0]
        cls.requests.append((self.command, path))
        api = f"/api/models/{cls.repo}/"
        if path.startswith(api + "revision/"):
            rev = path[len(api + "revision/"):]
            if rev not in (cls.commit, *cls.refs):
                return self._send(404, b'{"error": "Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"})
            info = {"id": cls.repo, "modelId": cls.repo, "sha": cls.commit,
                    "siblings": [{"rfilename": str(p.relative_to(cls.folder))} for p in self._files()]}
            return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
        if path.startswith(api + "tree/"):
            tree = [{"type": "file", "path": str(p.relative_to(cls.folder)), "size": p.stat().st_size,
                     "oid": hashlib.sha1(p.read_bytes()).hexdigest()} for p in self._files()]
            return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
        prefix = f"/{cls.repo}/resolve/{cls.commit}/"
        if path.startswith(prefix) and (cls.folder / path[len(prefix):]).is_file():
            data = (cls.folder / path[len(prefix):]).read_bytes()
            return self._send(200, data, {"X-Repo-Commit": cls.commit, "ETag": f'"{hashlib.sha1(data).hexdigest()}"'})
        if path.startswith("/api/models/") or path.startswith(f"/{cls.repo}/"):
            return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound" if cls.repo not in path else "EntryNotFound"})
        return self._send(404, b"{}")

    do_HEAD = do_GET


@pytest.fixture
def stand_in_hub(tiny_model_dir):
    StandInHub.folder, StandInHub.requests = tiny_model_dir, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield StandInHub, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
