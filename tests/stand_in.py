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

    def log_message(self, *args):
        pass

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
            resp = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "usage": usage,
                    "choices": [{"index": i, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": cls.json_reply if cls.json_reply is not None
                                             else f"{cls.chat_prefix} reply {i} "}}
                                for i in range(body.get("n", 1))]}
        else:
            text = cls.json_reply if cls.json_reply is not None else " text"
            resp = {"id": "x", "object": "text_completion", "created": 0, "model": body["model"], "usage": usage,
                    "choices": [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None}
                                for i in range(body.get("n", 1))]}
        data = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class StandInServer(ThreadingHTTPServer):
    # a listen backlog of 5 (the default) refuses connections when a loaded machine accepts slowly: the client
    # would see a refused connection where the test means a 503
    request_queue_size = 256


@pytest.fixture
def server():
    StandIn.bodies, StandIn.fail_first, StandIn.ok_budget, StandIn.fault = [], 0, None, "503"
    StandIn.chat_prefix, StandIn.json_reply = "", None
    httpd = StandInServer(("127.0.0.1", 0), StandIn)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
