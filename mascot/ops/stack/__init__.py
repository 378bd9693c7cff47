"""The team tracking stack (`mascot stack up | down | status`): PostgreSQL, SeaweedFS (S3) and `mlflow server`,
one module per service and a supervisor that starts, checks and stops them by process group."""
from mascot.ops.stack.supervisor import main

__all__ = ["main"]
