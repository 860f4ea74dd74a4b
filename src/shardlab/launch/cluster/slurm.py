"""`shardlab launch slurm`: the sbatch script of a run (docs/cluster.md, "Slurm").

One task per node (`--ntasks-per-node=1`), each `shardlab launch node`, which becomes shardlab's launcher and
its torchrun agent with the node's ranks; the c10d rendezvous is hosted on the first node of the allocation
(`scontrol show hostnames`) at a port derived from the job id (two jobs sharing a head node do not meet). The
time limit: `--signal=TERM@LEAD` has Slurm send SIGTERM to every task LEAD seconds before it; the ranks stop at
one step boundary, save, and the step exits 143, upon which the script requeues its own job. A preemption or
a node failure is requeued by Slurm itself (`--requeue`). The job id stays the same, and every attempt resumes
the run directory from its latest checkpoint (ckpt.resume=latest).
"""
from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field

from shardlab.launch.cluster.job import Run, quote

PORT_BASE, PORT_SPAN = 15000, 15000  # below Linux's ephemeral ports (32768 on): no outgoing socket holds it


@dataclass
class Batch:
    run: Run
    job_name: str
    time: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gpus_per_node: int = 0
    cpus_per_node: int | None = None  # the agent and all its ranks share one task's CPUs
    mem: str | None = None
    exclusive: bool = True
    signal_lead_s: int = 120
    requeue: bool = True
    workdir: str = "."
    sbatch_extra: list[str] = field(default_factory=list)  # more `#SBATCH` options, as given


def directives(b: Batch) -> list[str]:
    opts = [f"--job-name={b.job_name}", f"--nodes={b.run.nodes}", "--ntasks-per-node=1"]
    if b.gpus_per_node:
        opts.append(f"--gpus-per-node={b.gpus_per_node}")
    if b.cpus_per_node:
        opts.append(f"--cpus-per-task={b.cpus_per_node}")
    if b.mem:
        opts.append(f"--mem={b.mem}")
    if b.exclusive:
        opts.append("--exclusive")
    opts.append(f"--time={b.time}")
    opts += [f"--{k}={v}" for k, v in (("partition", b.partition), ("account", b.account), ("qos", b.qos)) if v]
    opts.append(f"--signal=TERM@{b.signal_lead_s}")
    opts.append("--requeue" if b.requeue else "--no-requeue")
    opts += ["--open-mode=append", f"--output={b.workdir}/slurm-%x-%j.out", f"--chdir={b.workdir}"]
    return [f"#SBATCH {o}" for o in opts + list(b.sbatch_extra)]


def script(b: Batch, command_line: str) -> str:
    r = b.run
    node = ["launch", "node", "--nnodes", '"$nnodes"', "--head", '"$head:$port"', "--timeout", str(r.timeout_s)]
    if r.iface:
        node += ["--iface", shlex.quote(r.iface)]
    train = ["--nproc", str(r.nproc), "--out", '"$RUN"', *(["--config", shlex.quote(r.config)] if r.config else []),
             "ckpt.resume=latest", '"${attempt[@]}"', *(shlex.quote(o) for o in r.overrides)]
    # (srun does not inherit sbatch's --cpus-per-task since Slurm 22.05; an salloc without -c sets none)
    cpus = f' --cpus-per-task="${{SLURM_CPUS_PER_TASK:-{b.cpus_per_node}}}"' if b.cpus_per_node else ""
    env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in r.env.items())
    lines = [
        "#!/bin/bash",
        f"# {command_line}",
        "# One torchrun agent per node (shardlab's launcher), c10d rendezvous on the first node (docs/cluster.md).",
        "#   sbatch THIS_FILE      a batch job: SIGTERM before the time limit saves the run (exit 143), and it is requeued",
        "#   bash THIS_FILE        inside an allocation (salloc): the same job step, not requeued",
        *directives(b),
        "",
        "set -uo pipefail  # not -e: the job step's exit code decides what happens next",
        "",
        "# the run directory, on storage every node mounts: each node writes its ranks' checkpoint shards there",
        f"RUN={shlex.quote(r.out)}",
        f"PY={shlex.quote(r.python)}",
        *([env.rstrip("\n")] if env else []),
        'nnodes="$SLURM_JOB_NUM_NODES"',
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "# a rendezvous port of this job's own (jobs sharing a head node must not meet), the same after a requeue",
        f"port=$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN} ))",
        "attempt=()",
        "# a requeued attempt (same job id) takes over the run directory's lock: its holder was this job's last",
        "# attempt, whose processes Slurm has ended (a node failure leaves the lock behind)",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then attempt=(--break-lock); fi',
        'echo "[slurm] job $SLURM_JOB_ID attempt $(( ${SLURM_RESTART_COUNT:-0} + 1 )): $nnodes node(s), '
        'rendezvous $head:$port, run $RUN"',
        "",
        f'srun --nodes="$nnodes" --ntasks-per-node=1{cpus} --kill-on-bad-exit=0 \\',
        f'    "$PY" -m shardlab {" ".join(node)} -- \\',
        f"    {' '.join(train)}",
        "rc=$?",
        "",
        "# 143: every rank stopped at one step boundary on SIGTERM and the checkpoint is written (the time limit's",
        "# warning, `scancel --signal=TERM`). A batch job puts itself back in the queue; the next attempt resumes.",
        "# (A preemption or a node failure is requeued by Slurm itself: --requeue.)",
        'if [ "$rc" -eq 143 ] && scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -q "BatchFlag=1"; then',
        '    echo "[slurm] run stopped and saved (exit 143): requeueing job $SLURM_JOB_ID"',
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "fi",
        'exit "$rc"',
        "",
    ]
    return "\n".join(lines)


def submit(path: str) -> tuple[int, str]:
    """`sbatch --parsable PATH`: (exit code, its output: the job id, or sbatch's error)."""
    try:
        done = subprocess.run(["sbatch", "--parsable", path], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return 2, "sbatch is not installed here (the script is written: submit it where Slurm is)"
    return done.returncode, (done.stdout.strip() or done.stderr.strip())
