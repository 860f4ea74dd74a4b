"""A private one-node Slurm for the tests (`make cluster-test` runs them: scripts/cluster_test.sh): munge with
its own key and socket, slurmctld and slurmd with a short slurm.conf, their own ports, state and spool
directories, all under one temporary directory; stopped (and the directory left to the caller) by `stop()`.

    cluster = LocalSlurm.start(tmp_dir)   # raises Unavailable (the reason) when it cannot
    env = cluster.env                     # SLURM_CONF for sbatch / squeue / scancel / salloc
    cluster.stop()
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")

CONF = """\
ClusterName=shardlabtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long before it may start again (120 s by default)
AuthInfo=socket={dir}/munge.sock,cred_expire=10
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SchedulerParameters=sched_interval=2
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class Unavailable(Exception):
    """Why the private Slurm cannot run here (the tests skip with it)."""


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalSlurm:
    def __init__(self, root: Path):
        self.root = root
        self.env = dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))

    @classmethod
    def start(cls, root: Path, timeout_s: float = 30) -> "LocalSlurm":
        missing = [d for d in DAEMONS if shutil.which(d) is None]
        if missing:
            raise Unavailable(f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge, or "
                              "scripts/slurm_test.sh)")
        if os.geteuid() != 0:
            raise Unavailable("the private Slurm runs its daemons as root (SlurmUser=root)")
        root.mkdir(parents=True, exist_ok=True)
        for d in ("state", "spool"):
            (root / d).mkdir(exist_ok=True)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        ctld_port, slurmd_port = _free_ports(2)
        host = socket.gethostname().split(".")[0]
        (root / "slurm.conf").write_text(CONF.format(host=host, ctld_port=ctld_port, slurmd_port=slurmd_port,
                                                     dir=root, cpus=os.cpu_count()))
        cluster = cls(root)
        try:
            cluster._daemon(["munged", f"--socket={root}/munge.sock", f"--key-file={key}", "--force",
                             f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log",
                             f"--seed-file={root}/munge.seed"])
            cluster._daemon(["slurmctld", "-f", f"{root}/slurm.conf"])
            cluster._daemon(["slurmd", "-f", f"{root}/slurm.conf"])
            cluster._wait_idle(timeout_s)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _daemon(self, cmd: list[str]) -> None:
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise Unavailable(f"{cmd[0]} did not start: {(done.stderr or done.stdout).strip()[-300:]}")

    def _wait_idle(self, timeout_s: float) -> None:
        deadline, state = time.monotonic() + timeout_s, ""
        while time.monotonic() < deadline:
            state = self.run(["sinfo", "-h", "-o", "%t"], check=False).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise Unavailable(f"the private Slurm's node is {state or 'unknown'!r} after {timeout_s:g} s "
                          f"(see {self.root}/slurmd.log)")

    def run(self, cmd: list[str], check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, check=check)

    def state(self, job: str) -> str:
        """The job's state and reason in the queue ('' once it has left it)."""
        return self.run(["squeue", "-h", "-j", job, "-o", "%T %r"], check=False).stdout.strip()

    def stop(self) -> None:
        # slurmd and slurmctld together (each takes seconds to shut down: ~5 s one after the other), munged,
        # which they authenticate with, after both
        for names in (("slurmd.pid", "slurmctld.pid"), ("munged.pid",)):
            self._stop_all([self._pid(name) for name in names])

    def _pid(self, pidfile: str) -> int | None:
        try:
            return int((self.root / pidfile).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _stop_all(pids: list[int | None]) -> None:
        """SIGTERM to each (by the pids they wrote), then wait 10 s for them all, SIGKILL to what is left."""
        live = []
        for pid in pids:
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
                live.append(pid)
            except ProcessLookupError:
                continue
        for _ in range(100):
            live = [pid for pid in live if _alive(pid)]
            if not live:
                return
            time.sleep(0.1)
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
