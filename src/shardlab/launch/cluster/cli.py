"""`shardlab launch slurm | k8s | node` (docs/cluster.md). Bad input: one line, exit code 2, nothing written."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from shardlab.errors import ConfigError, OneLineParser, fail
from shardlab.launch.cluster import job

USAGE = """usage: shardlab launch {slurm,k8s,node} ...

  slurm   write the sbatch script of a run (--submit: and submit it)   (shardlab launch slurm --help)
  k8s     write a Kubeflow Trainer v2 TrainJob, a JobSet or an Indexed Job   (shardlab launch k8s --help)
  node    start one node of a multi-node run (what the recipes run)    (shardlab launch node --help)
"""


def _run_options(p) -> None:
    p.add_argument("--nodes", type=int, default=1, help="nodes (one torchrun agent each)")
    p.add_argument("--nproc", type=int, default=None, help="processes (ranks) per node; default --gpus-per-node")
    p.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node (0: a CPU run, gloo)")
    p.add_argument("--config", help="the run's TOML config (made absolute: every node reads it)")
    p.add_argument("--out", help="run directory on storage every node mounts (default runs/NAME, absolute)")
    p.add_argument("--name", help="job name (default shardlab-STRATEGY)")
    p.add_argument("--iface", help="socket interface of the nodes' network: GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME")
    p.add_argument("--nccl", action="append", default=[], metavar="KEY=VALUE",
                   help="an NCCL option for every rank (IB_HCA=mlx5 sets NCCL_IB_HCA=mlx5); repeatable")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="more environment; repeatable")
    p.add_argument("--timeout", type=int, default=600, help="seconds for the head node to answer and every node "
                   "to join the rendezvous (then one line, not a hang)")
    p.add_argument("--python", default=sys.executable, help="the interpreter on the nodes (default: this one)")
    p.add_argument("--write", metavar="FILE", help="where to write it (default NAME.sbatch / NAME.yaml here; - for stdout)")
    p.add_argument("overrides", nargs="*", metavar="key=value")


def slurm_parser():
    p = OneLineParser(prog="shardlab launch slurm", description="Write the sbatch script of a run: one torchrun "
                      "agent per node, c10d rendezvous on the first node, SIGTERM before the time limit (the run "
                      "saves, exits 143) and requeue (the next attempt resumes).")
    _run_options(p)
    p.add_argument("--time", default="01:00:00", help="time limit (sbatch --time)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--qos")
    p.add_argument("--cpus-per-node", type=int, help="CPUs of the node's one task (the agent and its ranks)")
    p.add_argument("--mem", help="memory per node (sbatch --mem)")
    p.add_argument("--shared", action="store_true", help="do not ask for whole nodes (no --exclusive)")
    p.add_argument("--signal-lead", type=int, default=120, help="seconds before the time limit that SIGTERM comes")
    p.add_argument("--no-requeue", action="store_true", help="neither requeue on preemption nor after a save on SIGTERM")
    p.add_argument("--sbatch", action="append", default=[], metavar="OPTION", help="another #SBATCH option, as "
                   "given (--sbatch=--constraint=h100); repeatable")
    p.add_argument("--submit", action="store_true", help="submit it with sbatch")
    return p


def _common(args, cfg_name: str = "") -> tuple[job.Run, object, str]:
    nproc = args.nproc or args.gpus_per_node
    if not nproc:
        raise ConfigError("--nproc N (ranks per node) or --gpus-per-node G is needed")
    config = args.config
    if config and not getattr(args, "keep_out", False):  # (a pod reads it in its image or on the shared volume)
        config = str(Path(config).resolve())
    env = {**job.env_pairs(args.nccl, "NCCL_"), **job.env_pairs(args.env)}
    run = job.Run(nodes=args.nodes, nproc=nproc, out="", config=config, overrides=list(args.overrides),
                  iface=args.iface, env=env, timeout_s=args.timeout, python=args.python)
    cfg = job.check(run)
    name = args.name or f"shardlab-{cfg.parallel.strategy}"
    if getattr(args, "keep_out", False):  # a path in the pods, under the shared volume's mount
        run.out = args.out or f"{args.mount.rstrip('/')}/runs/{name}"
    else:
        run.out = str(Path(args.out or f"runs/{name}").resolve())
    return run, cfg, name


def _emit(text: str, dest: str) -> None:
    if dest == "-":
        sys.stdout.write(text)
        return
    tmp = Path(f"{dest}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, dest)


def cmd_slurm(argv: list[str]) -> int:
    from shardlab.launch.cluster import slurm

    args = slurm_parser().parse_intermixed_args(argv)
    try:
        run, cfg, name = _common(args)
        if args.signal_lead <= cfg.ckpt.signal_grace_s:
            raise ConfigError(f"--signal-lead {args.signal_lead}: must exceed ckpt.signal_grace_s="
                              f"{cfg.ckpt.signal_grace_s:g} (the ranks' time to stop and save after SIGTERM)")
        if args.submit and args.write == "-":
            raise ConfigError("--submit needs the script in a file: give --write FILE or leave it out")
        batch = slurm.Batch(run=run, job_name=name, time=args.time, partition=args.partition, account=args.account,
                            qos=args.qos, gpus_per_node=args.gpus_per_node, cpus_per_node=args.cpus_per_node,
                            mem=args.mem, exclusive=not args.shared, signal_lead_s=args.signal_lead,
                            requeue=not args.no_requeue, workdir=os.getcwd(), sbatch_extra=args.sbatch)
    except ConfigError as e:
        return fail(str(e))
    dest = args.write or f"{name}.sbatch"
    _emit(slurm.script(batch, "shardlab launch slurm " + job.quote(argv)), dest)
    if dest != "-":
        print(f"[launch] wrote {dest}: {run.nodes} node(s) x {run.nproc} rank(s) -> {run.out}", file=sys.stderr)
    if not args.submit:
        return 0
    code, said = slurm.submit(dest)
    if code != 0:
        return fail(f"sbatch {dest}: {said}")
    print(said)  # the job id (sbatch --parsable): `jobid=$(shardlab launch slurm ... --submit)`
    return 0


def cmd_k8s(argv: list[str]) -> int:
    from shardlab.launch.cluster import k8s

    p = OneLineParser(prog="shardlab launch k8s", description="Write a Kubeflow Trainer v2 TrainJob (or a JobSet, "
                      "or an Indexed Job with its headless Service) for a run.")
    _run_options(p)
    k8s.add_options(p)
    args = p.parse_intermixed_args(argv)
    try:
        args.keep_out = True  # a path inside the pods (the shared volume's mount), not on this host
        run, cfg, name = _common(args)
        text = k8s.manifest(args.kind, run, name, args, cfg)
    except ConfigError as e:
        return fail(str(e))
    dest = args.write or f"{name}.yaml"
    _emit(text, dest)
    if dest != "-":
        print(f"[launch] wrote {dest}: {args.kind}, {run.nodes} pod(s) x {run.nproc} rank(s) -> {run.out}",
              file=sys.stderr)
    return 0


def cmd_node(argv: list[str]) -> int:
    from shardlab.launch.cluster import node

    p = OneLineParser(prog="shardlab launch node", description="Start one node of a multi-node run: check the "
                      "interface and the head node, then `shardlab train --nnodes ...` with the arguments after --.")
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--node-rank", type=int, default=None, help="this node's rank (default: SLURM_NODEID)")
    p.add_argument("--head", required=True, metavar="HOST:PORT", help="node 0's address and rendezvous port")
    p.add_argument("--iface", help="socket interface: GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME")
    p.add_argument("--timeout", type=float, default=600, help="seconds for the head to answer and the nodes to join")
    train = []
    if "--" in argv:
        argv, train = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = p.parse_args(argv)
    try:
        return node.start(args.nnodes, args.node_rank, args.head, args.iface, args.timeout, train)
    except ConfigError as e:
        return fail(str(e))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    commands = {"slurm": cmd_slurm, "k8s": cmd_k8s, "node": cmd_node}
    if argv[0] not in commands:
        return fail(f"shardlab launch {argv[0]!r}: expected one of {', '.join(commands)}")
    try:
        return commands[argv[0]](argv[1:])
    except SystemExit as e:  # --help (0) or a usage error, already one line (2)
        return e.code if isinstance(e.code, int) else 2
