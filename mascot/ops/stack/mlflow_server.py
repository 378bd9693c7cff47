"""`mlflow server` with basic-auth and proxied artifacts, on PostgreSQL and SeaweedFS; no secret in a file or on
its command line (the database URI goes in the environment)."""
from __future__ import annotations

import os
from pathlib import Path
import secrets
import urllib.error
from urllib.parse import quote
import urllib.request

from mascot.ops.stack.common import StackConfig, bin_path, secret, start_service


def write_auth_config(cfg: StackConfig) -> Path:
    """MLflow's basic-auth settings: no secret in it (the admin password comes from the environment)."""
    path = cfg.path / "basic_auth.ini"
    path.write_text("[mlflow]\ndefault_permission = READ\n"
                    f"database_uri = sqlite:///{cfg.path / 'basic_auth.db'}\n"
                    f"admin_username = {cfg.admin_username}\n"
                    "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                    "grant_default_workspace_access = false\n")
    return path


def start_mlflow(cfg: StackConfig) -> None:
    db_uri = (f"postgresql+psycopg2://{cfg.db_user}:{quote(secret('db_password'), safe='')}"
              f"@127.0.0.1:{cfg.pg_port}/{cfg.db_name}")
    env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": db_uri, "MLFLOW_S3_ENDPOINT_URL": cfg.s3_endpoint,
           "AWS_ACCESS_KEY_ID": secret("s3_access_key"), "AWS_SECRET_ACCESS_KEY": secret("s3_secret_key"),
           "MLFLOW_AUTH_CONFIG_PATH": str(write_auth_config(cfg)), "MLFLOW_AUTH_ADMIN_USERNAME": cfg.admin_username,
           "MLFLOW_AUTH_ADMIN_PASSWORD": secret("admin_password"),
           # CSRF key of the UI's forms: a team running several servers sets one; else a fresh one per start
           "MLFLOW_FLASK_SERVER_SECRET_KEY": os.environ.get("MLFLOW_FLASK_SERVER_SECRET_KEY") or secrets.token_hex(32),
           # the job runner and its 7 workers cost ~2 GB and serve features this pipeline does not use
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(var, None)
    start_service(cfg, "mlflow", [
        bin_path("mlflow"), "server", "--app-name", "basic-auth", "--artifacts-destination", "s3://mlflow/artifacts",
        "--serve-artifacts", "--host", "127.0.0.1", "--port", str(cfg.mlflow_port), "--workers", "1"], env)


def mlflow_healthy(cfg: StackConfig) -> bool:
    try:
        with urllib.request.urlopen(f"{cfg.tracking_uri}/health", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False
