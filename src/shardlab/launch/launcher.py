"""Launching: one process per rank, by torchrun (`torch.distributed.run`).

`shardlab train --nproc N` validates everything first (so bad input exits 2 with nothing written),
creates the run directory with the resolved `config.toml`, then re-executes itself under torchrun;
each rank re-enters `shardlab train` with RANK/WORLD_SIZE set and runs the trainer. Running under
`torchrun` directly works too: the environment says we are already a rank.

Signals (docs/training.md, "When a run is interrupted"): the agent runs in a session of its own, as
torchrun runs each rank, so a terminal's Ctrl-C reaches only this launcher, which forwards it once;
the agent forwards it to the ranks, which stop at a step boundary and save. A second signal kills the
agent at once, and the ranks with it (their parent-death signal, shardlab.launch.orphans).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from shardlab import config as config_mod
from shardlab.launch import failure, interrupt, orphans, runlock
from shardlab.launch.runlock import RunLocked  # noqa: F401 (the CLI's "in use" refusal)


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


def torchrun_command(args, run_dir: Path, config_path: Path, grace_s: float = 25.0) -> list[str]:
    # The agent kills its workers `--shutdown-timeout` s after forwarding a signal (30 by default):
    # give the ranks their whole grace (ckpt.signal_grace_s) to stop and save, and a little more.
    shutdown = int(grace_s) + 5 if grace_s > 0 else 24 * 3600
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
           f"--max-restarts={args.max_restarts}", f"--shutdown-timeout={shutdown}"]
    if args.nnodes > 1:
        # c10d rendezvous: the node that owns --master-addr hosts the store; node ranks are assigned by it.
        cmd += [f"--nnodes={args.nnodes}", f"--node-rank={args.node_rank}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={args.master_addr}:{args.master_port}", f"--rdzv-id=shardlab-{args.master_port}",
                # Say which node hosts the store: on one machine every node looks like the endpoint's host,
                # and two launchers racing to host it can deadlock the rendezvous.
                f"--rdzv-conf=is_host={'true' if args.node_rank == 0 else 'false'}" + _join_timeout()]
    else:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{args.master_port or free_port()}",
                "--nnodes=1"]
    return cmd + ["-m", "shardlab", "train", "--out", str(run_dir), "--config", str(config_path)]


def _join_timeout() -> str:
    # `shardlab launch node --timeout S` (launch/cluster/node.py): a node that never joins ends the rendezvous
    # after S s with the launcher's verdict, not after torchrun's 600 s
    seconds = os.environ.get("SHARDLAB_RDZV_JOIN_TIMEOUT", "")
    # SHARDLAB_RDZV_KEEP_ALIVE=S (tests only; unset: torchrun's 5 s): the agents' heartbeat period. A node
    # whose agent died leaves the rendezvous after 3 missed beats, which a restarted node waits out to rejoin.
    beat = os.environ.get("SHARDLAB_RDZV_KEEP_ALIVE", "")
    return (f",join_timeout={seconds}" if seconds.isdigit() else "") + \
        (f",keep_alive_interval={beat}" if beat.isdigit() else "")


def launch(args, cfg, run_dir: Path, main) -> int:
    """Run the ranks. Returns the exit code of the job. Raises RunLocked (nothing written) when another
    live run holds the run directory: one writer per directory, node 0's launcher holds the lock.
    `main(cfg, run_dir)`: what a rank runs when the launcher is the rank itself (one process) or restarts a
    lone replica (the trainer's entry point: the CLI gives it, so the launcher sits below the trainer)."""
    lock = runlock.acquire(run_dir, getattr(args, "break_lock", False)) if args.node_rank == 0 else None
    try:
        return _launch(args, cfg, run_dir, main)
    finally:
        if lock is not None:
            lock.release()


def _launch(args, cfg, run_dir: Path, main) -> int:
    config_path = write_config(run_dir, cfg)
    world = args.nproc * args.nnodes
    if world == 1:
        if cfg.parallel.fault_tolerant and args.max_restarts > 0:  # restart the replica's process when it dies
            from shardlab.launch.supervisor import supervise
            return supervise(cfg, run_dir, args.max_restarts, main)
        if cfg.parallel.strategy != "single":  # a one-rank process group for data-parallel strategies
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0",
                              WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        return _in_process(cfg, run_dir, main)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", str(cfg.train.threads)),
               PYTHONUNBUFFERED="1", SHARDLAB_RESUME_ANNOUNCED="1")  # the ranks need not say it again
    if args.max_restarts > 0:
        # A restarted worker group must not share the agent's rendezvous store: its keys from the failed
        # attempt make the new ranks connect to dead peers (pytorch/pytorch#135712).
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    # torchrun's agent runs with its own messages in RUN/launcher.log (see launch/agent.py); the ranks' output
    # reaches the terminal as before, and a failure ends with shardlab's verdict and exit code (launch/failure.py).
    node = "" if args.nnodes == 1 else f"_node{args.node_rank}"  # nodes may share the run directory
    log, failures = run_dir / f"launcher{node}.log", run_dir / "failures" / f"launcher{node}.json"
    failure.clear(run_dir, failures)  # (the agent and the ranks create failures/ when they have a record)
    cmd = torchrun_command(args, run_dir, config_path, cfg.ckpt.signal_grace_s)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    cmd[1:3] = ["-m", "shardlab.launch.agent", str(log), str(failures), "torch.distributed.run"]
    env[orphans.PARENT_ENV] = str(os.getpid())
    code, forward = _run_agent(cmd, env)
    failure.tidy(run_dir, log)  # no empty launcher.log or failures/ left behind
    stopped = failure.interrupted(run_dir, forward.signum, forward.aborted)
    if stopped is not None:  # a signal, to this launcher or to a rank: at most 3 lines, exit 130/143
        lines, code = stopped
    elif code == 0:
        return 0
    else:
        lines, code = failure.verdict(run_dir, code, log, failures)
    print("\n".join(lines), file=sys.stderr, flush=True)
    return code


class _Forward:
    """This launcher's SIGINT/SIGTERM handler: the first is forwarded to the agent; a second one kills
    the agent at once (and thereby the ranks: their parent-death signal), abandoning a save in flight."""

    def __init__(self):
        self.proc, self.signum, self.aborted = None, None, False

    def __call__(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
            if self.proc is not None:
                self.proc.send_signal(signum)
        elif self.proc is not None:
            self.aborted = True
            self.proc.kill()

    def started(self, proc) -> None:
        self.proc = proc
        if self.signum is not None:  # it came while the agent was being started
            proc.send_signal(self.signum)


def _run_agent(cmd: list[str], env: dict) -> tuple[int, _Forward]:
    forward = _Forward()
    previous = {s: signal.signal(s, forward) for s in interrupt.SIGNALS}
    try:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        forward.started(proc)
        code = proc.wait()  # (a handled signal does not interrupt the wait)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code, forward


def _in_process(cfg, run_dir: Path, train_main) -> int:
    """A one-rank run in this process: the launcher is the rank, and handles the signals itself."""
    previous = {s: signal.getsignal(s) for s in interrupt.SIGNALS}
    interrupt.install(cfg.ckpt.signal_grace_s)
    failure.clear(run_dir, run_dir / "failures" / "launcher.json")
    try:
        train_main(cfg, run_dir)
    except SystemExit as e:
        stopped = failure.interrupted(run_dir) if e.code in (130, 143) else None
        if stopped is None:
            raise
        print("\n".join(stopped[0]), file=sys.stderr, flush=True)
        return stopped[1]
    finally:  # a caller in the same process (a test, a notebook) gets its own handlers back
        failure.tidy(run_dir)
        for s, handler in previous.items():
            signal.signal(s, handler)
        interrupt.reset()
    return 0
