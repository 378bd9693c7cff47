"""`mascot serve` when the server dies by itself: non-zero exit and the last lines of its log."""
import subprocess
import sys


def fake_python(tmp_path, script: str):
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


def test_serve_reports_a_server_that_dies_before_answering(tmp_path):
    py = fake_python(tmp_path, 'echo "INFO starting engine"\necho "RuntimeError: CPU Generator does not use offset"\nexit 3\n')
    log = tmp_path / "vllm.log"
    proc = subprocess.run([sys.executable, "-m", "mascot.cli", "serve", "--python", str(py), "--port", "8799",
                           "--log", str(log)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert "exited by itself with code 3" in proc.stderr
    assert "CPU Generator does not use offset" in proc.stderr  # the log's last lines, not only "stopped"


def test_serve_reports_a_server_that_dies_while_serving(tmp_path):
    # answers /v1/models for a moment, then dies
    script = ('exec "' + sys.executable + '" -c "\nimport http.server, threading, time, sys\n'
              'class H(http.server.BaseHTTPRequestHandler):\n'
              '    def do_GET(self):\n        self.send_response(200); self.end_headers(); self.wfile.write(b\'{}\')\n'
              '    def log_message(self, *a): pass\n'
              's = http.server.HTTPServer((\'127.0.0.1\', 8798), H)\n'
              'threading.Thread(target=s.serve_forever, daemon=True).start()\n'
              'time.sleep(3); print(\'engine core died: worker killed\', flush=True); sys.exit(7)\n"\n')
    py = fake_python(tmp_path, script)
    proc = subprocess.run([sys.executable, "-m", "mascot.cli", "serve", "--python", str(py), "--port", "8798",
                           "--log", str(tmp_path / "v.log")], capture_output=True, text=True, timeout=60)
    assert "mascot serve: ready" in proc.stdout
    assert proc.returncode == 7, proc.stderr
    assert "while serving" in proc.stderr and "engine core died: worker killed" in proc.stderr


def test_data_parallel_size_reaches_vllm_and_splits_the_gpus():
    import pytest

    from mascot.ops.serve import ServeConfig, build_command

    cmd, _ = build_command(ServeConfig(model="m", data_parallel_size=4), gpus=8)
    assert cmd[cmd.index("--data-parallel-size") + 1] == "4" and cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    cmd, _ = build_command(ServeConfig(model="m"), gpus=8)
    assert "--data-parallel-size" not in cmd and cmd[cmd.index("--tensor-parallel-size") + 1] == "8"
    with pytest.raises(ValueError, match="needs 16 GPUs; 8 are visible"):
        build_command(ServeConfig(model="m", data_parallel_size=2, tensor_parallel_size=8), gpus=8)
