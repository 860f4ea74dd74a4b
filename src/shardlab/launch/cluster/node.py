"""`shardlab launch node`: one node of a multi-node run, as every recipe (sbatch, Kubernetes, by hand) starts it.

    shardlab launch node --nnodes 2 --node-rank R --head ADDR:PORT [--iface IF] [--timeout S] -- TRAIN ARGS

Before anything starts it checks what otherwise hangs: the interface (`--iface`) exists and has an IPv4
address, and on the other nodes the head node's rendezvous port answers from that interface's address within
`--timeout` seconds (the head's store comes up when its launcher has started its agent: the probe retries).
Either failing is one line and exit code 2. Then GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME name the interface
and its address is torchrun's --local-addr (the ranks' connections and their store go through it, not through
whatever the host name resolves to), the rendezvous waits at most `--timeout` for every node to join (SHARDLAB_RDZV_JOIN_TIMEOUT, read by the launcher), and this
process becomes `shardlab train --nnodes N --node-rank R --master-addr ADDR --master-port PORT TRAIN ARGS`
(exec: the scheduler's signals reach shardlab's launcher itself, docs/training.md "When a run is interrupted").
"""
from __future__ import annotations

import errno
import os
import socket
import sys
import time

from shardlab.errors import ConfigError
from shardlab.launch.cluster import netif

JOIN_TIMEOUT_ENV = "SHARDLAB_RDZV_JOIN_TIMEOUT"


def node_rank(given: int | None) -> int:
    """--node-rank, or Slurm's SLURM_NODEID (each srun task's own node index)."""
    if given is not None:
        return given
    if os.environ.get("SLURM_NODEID", "").isdigit():
        return int(os.environ["SLURM_NODEID"])
    raise ConfigError("--node-rank is needed outside a Slurm job step (there SLURM_NODEID gives it)")


def parse_head(head: str) -> tuple[str, int]:
    host, sep, port = head.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--head {head!r}: must be HOST:PORT (the head node's rendezvous address)")
    return host, int(port)


def interface_address(iface: str) -> str:
    if iface not in netif.names():
        raise ConfigError(f"--iface {iface}: no such interface on {socket.gethostname()} "
                          f"(it has {', '.join(netif.names())})")
    addr = netif.ipv4(iface)
    if addr is None:
        raise ConfigError(f"--iface {iface}: the interface has no IPv4 address on {socket.gethostname()} "
                          "(down, or not configured)")
    return addr


def reach_head(host: str, port: int, source: str | None, timeout_s: float) -> None:
    """Connect to the head's rendezvous port (from `source`, the interface's address) until it answers;
    a ConfigError naming the last failure when `timeout_s` passes first."""
    deadline, last = time.monotonic() + timeout_s, "no answer"
    while True:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(min(5.0, max(0.1, deadline - time.monotonic())))
                if source:
                    s.bind((source, 0))
                s.connect((socket.gethostbyname(host), port))
            return
        except OSError as e:
            last = e.strerror or type(e).__name__
            if isinstance(e, socket.timeout):
                last = "connection timed out"
            elif e.errno == errno.EADDRNOTAVAIL:
                last = f"{source} cannot reach it"
        if time.monotonic() >= deadline:
            where = f" from {source}" if source else ""
            raise ConfigError(f"the head node {host}:{port} did not answer{where} within {timeout_s:g} s "
                              f"({last}); check --head, that node 0 was started, and --iface")
        time.sleep(0.5)


def prepare(nnodes: int, rank: int, head: str, iface: str | None, timeout_s: float) -> tuple[list[str], dict]:
    """The `shardlab train` node arguments and the environment, after the checks (ConfigError: one line)."""
    if nnodes < 1 or not 0 <= rank < nnodes:
        raise ConfigError(f"--node-rank {rank}: must be in 0..{nnodes - 1} (--nnodes {nnodes})")
    host, port = parse_head(head)
    env = dict(os.environ)
    source = None
    if iface:
        source = interface_address(iface)
        # PET_LOCAL_ADDR is torchrun's --local-addr: node 0 tells the ranks this address for their store, not
        # its host name (which may resolve to another network, or to nothing, on the other nodes)
        env.update(GLOO_SOCKET_IFNAME=iface, NCCL_SOCKET_IFNAME=iface, PET_LOCAL_ADDR=source)
    if rank > 0:
        reach_head(host, port, source, timeout_s)
    env[JOIN_TIMEOUT_ENV] = str(int(timeout_s))
    return ["--nnodes", str(nnodes), "--node-rank", str(rank), "--master-addr", host, "--master-port", str(port)], env


def start(nnodes: int, rank: int | None, head: str, iface: str | None, timeout_s: float, train_args: list[str]) -> int:
    node_args, env = prepare(nnodes, node_rank(rank), head, iface, timeout_s)
    argv = [sys.executable, "-m", "shardlab", "train", *node_args, *train_args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)  # (does not return)
    return 0
