"""SeaweedFS: the S3 object store for MLflow's artifacts and the DVC remote (`weed mini`, one process group)."""
from __future__ import annotations

import os

from mascot.ops.stack.common import StackConfig, bin_path, port_open, secret, start_service


def start_seaweedfs(cfg: StackConfig) -> None:
    data = cfg.path / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": secret("s3_access_key"),
           "AWS_SECRET_ACCESS_KEY": secret("s3_secret_key")}
    start_service(cfg, "seaweedfs", [
        bin_path("weed"), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.port={cfg.s3_port}", f"-master.port={cfg.weed_master_port}", f"-volume.port={cfg.weed_volume_port}",
        f"-filer.port={cfg.weed_filer_port}", f"-metricsPort={cfg.weed_metrics_port}", "-webdav=false",
        "-admin.ui=false", "-s3.port.iceberg=0", f"-bucket={','.join(cfg.buckets)}"], env)


def s3_ready(cfg: StackConfig) -> bool:
    """Answers, and the buckets exist (an authenticated HEAD on each)."""
    if not port_open(cfg.s3_port):
        return False
    try:
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=cfg.s3_endpoint, aws_access_key_id=secret("s3_access_key"),
                          aws_secret_access_key=secret("s3_secret_key"), region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5))
        for bucket in cfg.buckets:
            s3.head_bucket(Bucket=bucket)
        return True
    except Exception:  # not up yet: any failure means "keep waiting"
        return False
