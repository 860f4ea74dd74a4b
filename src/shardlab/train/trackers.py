"""`train.tracker`: experiment trackers beside metrics.jsonl (`tensorboard`, `mlflow`, `wandb`; several
comma-separated, e.g. `train.tracker=tensorboard,mlflow`; `none` by default).

Every tracker is one small class with the same two calls, `log(step, scalars)` and `close()`, opened on rank 0
only (the metrics log exists there alone) with the run's resolved config, and fed the same numbers as
metrics.jsonl: every numeric field of a record (`loss`, `lr`, `tokens_per_s`, `grad_norm`, `val_loss`, ...).
All of them write files under the run directory and nothing else; none ever opens a connection or starts a
server:

    tensorboard  RUN/tb/           event files: `tensorboard --logdir RUN/tb`; the config as text
    mlflow       RUN/mlflow.db     MLflow's local SQLite store, experiment "shardlab", run named after RUN;
                                   the config as params (`train.steps`, ...): `mlflow ui --backend-store-uri
                                   sqlite:///RUN/mlflow.db`. (MLflow's ./mlruns file store is deprecated.)
    wandb        RUN/wandb/        W&B's offline mode (no account, no network); the config as the run's
                                   config: `wandb sync RUN/wandb/offline-run-*` uploads it later if you want

The packages are optional (`pip install 'shardlab[track]'`); a tracker named whose package is missing is a
ConfigError before the run starts (`check`). This module imports none of them at import time.
"""
from __future__ import annotations

import os
from pathlib import Path

from shardlab.config.trackers import NAMES, PACKAGES, ConfigError, check, installed, parse  # noqa: F401 (re-exported)


def open_trackers(spec: str, run_dir: Path, config: dict) -> list:
    """One opened tracker per name in `spec`; `config` is the resolved config as {section: {key: value}}."""
    return [_CLASSES[n](Path(run_dir), config) for n in check(spec)]


def flat(config: dict) -> dict[str, object]:
    """{section: {key: value}} -> {"section.key": value}: the names `shardlab train` takes."""
    return {f"{s}.{k}": v for s, keys in config.items() for k, v in keys.items()}


class TensorBoard:
    def __init__(self, run_dir: Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tb"))
        # TensorBoard renders markdown: a two-space indent keeps the TOML-like lines apart
        self.writer.add_text("config", "\n".join(f"    {k} = {v!r}" for k, v in flat(config).items()), 0)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for k, v in scalars.items():
            self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        self.writer.close()


class MLflow:
    EXPERIMENT = "shardlab"

    def __init__(self, run_dir: Path, config: dict):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # MLflow 3 reports usage unless told not to
        import logging

        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # a new store's table creation is logged at INFO (set on import)
            logging.getLogger(name).setLevel(logging.WARNING)

        run_dir = run_dir.resolve()
        self.client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
        exp = self.client.get_experiment_by_name(self.EXPERIMENT)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(
            self.EXPERIMENT, artifact_location=(run_dir / "mlartifacts").as_uri())  # never ./mlartifacts
        # a resumed run (the same directory) continues its MLflow run; a new directory is a new store anyway
        found = self.client.search_runs([exp_id], max_results=1, order_by=["attributes.start_time DESC"])
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            run = self.client.create_run(exp_id, run_name=run_dir.name, tags={"shardlab.run_dir": str(run_dir)})
            self.run_id = run.info.run_id
            params = [Param(k, str(v)) for k, v in flat(config).items()]
            for i in range(0, len(params), 100):  # log_batch takes at most 100 params a call
                self.client.log_batch(self.run_id, params=params[i:i + 100])
            self.client.log_batch(self.run_id, tags=[RunTag("mlflow.note.content", f"shardlab run {run_dir}")])
        self.metric = Metric

    def log(self, step: int, scalars: dict[str, float]) -> None:
        import time

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[self.metric(k, float(v), now, step) for k, v in scalars.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandB:
    def __init__(self, run_dir: Path, config: dict):
        os.environ["WANDB_MODE"] = "offline"  # whatever the environment says: shardlab never uploads
        import wandb

        settings = wandb.Settings(mode="offline", console="off", silent=True, disable_git=True, save_code=False,
                                  x_save_requirements=False)
        self.run = wandb.init(dir=str(run_dir), project="shardlab", name=Path(run_dir).resolve().name,
                              config=config, settings=settings)
        # the x-axis is the record's own `step`: a rollback's replayed steps are logged again, as in
        # metrics.jsonl, where W&B's implicit step would refuse a step that goes back
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({**scalars, "step": step})

    def close(self) -> None:
        self.run.finish()


_CLASSES = {"tensorboard": TensorBoard, "mlflow": MLflow, "wandb": WandB}
