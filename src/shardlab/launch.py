"""Launching: one process per rank, by torchrun (`torch.distributed.run`).

`shardlab train --nproc N` validates everything first (so bad input exits 2 with nothing written),
creates the run directory with the resolved `config.toml`, then re-executes itself under torchrun;
each rank re-enters `shardlab train` with RANK/WORLD_SIZE set and runs the trainer. Running under
`torchrun` directly works too: the environment says we are already a rank.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from shardlab import config as config_mod
from shardlab import failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def default_run_dir(strategy: str) -> Path:
    if under_torchrun():  # every rank must agree on the name without talking: use the job's run id
        return Path("runs") / f"{os.environ.get('TORCHELASTIC_RUN_ID', 'torchrun')}-{strategy}"
    base = Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{strategy}"
    path, i = base, 1
    while path.exists():
        path, i = Path(f"{base}-{i}"), i + 1
    return path


def write_config(run_dir: Path, cfg) -> Path:
    """Write the resolved config atomically (several launchers may write the same file)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.toml"
    tmp = run_dir / f".config.toml.{os.getpid()}"
    tmp.write_text(config_mod.to_toml(cfg))
    os.replace(tmp, path)
    return path


def torchrun_command(args, run_dir: Path, config_path: Path) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           f"--max-restarts={args.max_restarts}"]
    if args.nnodes > 1:
        # c10d rendezvous: the node that owns --master-addr hosts the store; node ranks are assigned by it.
        cmd += [f"--nnodes={args.nnodes}", f"--node-rank={args.node_rank}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={args.master_addr}:{args.master_port}", f"--rdzv-id=shardlab-{args.master_port}",
                # Say which node hosts the store: on one machine every node looks like the endpoint's host,
                # and two launchers racing to host it can deadlock the rendezvous.
                f"--rdzv-conf=is_host={'true' if args.node_rank == 0 else 'false'}"]
    else:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{args.master_port or free_port()}",
                "--nnodes=1"]
    return cmd + ["-m", "shardlab", "train", "--out", str(run_dir), "--config", str(config_path)]


def launch(args, cfg, run_dir: Path) -> int:
    """Run the ranks. Returns the exit code of the job."""
    config_path = write_config(run_dir, cfg)
    world = args.nproc * args.nnodes
    if world == 1:
        if cfg.parallel.fault_tolerant and args.max_restarts > 0:  # restart the replica's process when it dies
            from shardlab.parallel.fault_tolerant import supervise
            return supervise(cfg, run_dir, args.max_restarts)
        if cfg.parallel.strategy != "single":  # a one-rank process group for data-parallel strategies
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0",
                              WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        from shardlab.train.trainer import main as train_main
        train_main(cfg, run_dir)
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(cfg.train.threads)),
               PYTHONUNBUFFERED="1", SHARDLAB_RESUME_ANNOUNCED="1")  # the ranks need not say it again
    if args.max_restarts > 0:
        # A restarted worker group must not share the agent's rendezvous store: its keys from the failed
        # attempt make the new ranks connect to dead peers (pytorch/pytorch#135712).
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    # torchrun's agent runs with its own messages in RUN/launcher.log (see launch_agent); the ranks' output
    # reaches the terminal as before, and a failure ends with shardlab's verdict and exit code (failure.py).
    node = "" if args.nnodes == 1 else f"_node{args.node_rank}"  # nodes may share the run directory
    log, failures = run_dir / f"launcher{node}.log", run_dir / "failures" / f"launcher{node}.json"
    failure.clear(run_dir, failures)
    failures.parent.mkdir(parents=True, exist_ok=True)
    cmd = torchrun_command(args, run_dir, config_path)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    cmd[1:3] = ["-m", "shardlab.launch_agent", str(log), str(failures), "torch.distributed.run"]
    code = subprocess.call(cmd, env=env)
    if code == 0:
        return 0
    lines, code = failure.verdict(run_dir, code, log, failures)
    print("\n".join(lines), file=sys.stderr, flush=True)
    return code
