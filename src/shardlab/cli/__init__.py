"""One entry point: shardlab train | data | bench | trace | explain | compare | ckpt | doctor | plan | pp | generate.

Bad input anywhere -> one clear line on stderr and exit code 2, with nothing written.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from shardlab.errors import OneLineParser, fail, one_line  # noqa: F401 - `cli.fail` / `cli.one_line` are used by the tests

# Subcommands owned by their packages: each exposes main(argv) -> int.
SUBCOMMANDS = {
    "bench": "shardlab.bench.cli",
    "trace": "shardlab.cli.trace",
    "explain": "shardlab.cli.explain",
    "compare": "shardlab.cli.compare",
    "ckpt": "shardlab.checkpoint.cli",
    "data": "shardlab.data.cli",
    "doctor": "shardlab.cli.doctor",
    "plan": "shardlab.plan.cli",
    "pp": "shardlab.parallel.pp.cli",
    "generate": "shardlab.generate.cli",
    "lighthouse": "shardlab.launch.lighthouse",
    "launch": "shardlab.launch.cluster.cli",
}

USAGE = """usage: shardlab {train,resume,data,bench,trace,explain,compare,ckpt,doctor,plan,pp,generate,lighthouse} ...

  train    train a GPT with a data-parallel strategy          (shardlab train --help)
  resume   continue a run from its latest checkpoint          (shardlab resume RUN [key=value ...])
  data     prepare token shards from text, jsonl, parquet     (shardlab data prepare --help)
  bench    run a benchmark suite and write a report           (shardlab bench --help)
  trace    analyse a traced run: overlap, exposed comm, skew  (shardlab trace RUN)
  explain  a run's predicted step and memory beside its measured (shardlab explain RUN)
  compare  runs side by side: table, plots, config diff      (shardlab compare RUN RUN ...)
  ckpt     list, verify, inspect, export checkpoints          (shardlab ckpt --help)
  doctor   diagnose hangs and anomalies                       (shardlab doctor --help)
  plan     predict memory, traffic and step time at scale     (shardlab plan --help)
  pp       pipeline schedules as tables of actions, drawn     (shardlab pp show zbv --p 4 --m 8)
  generate generate text from a checkpoint (KV cache, tp/pp/dp) (shardlab generate --help)
  lighthouse host the store fault-tolerant replicas meet at  (shardlab lighthouse --help)
"""


def train_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="shardlab train", description="Train a GPT with a data-parallel strategy.",
                                epilog="Overrides are key=value, e.g. parallel.strategy=ddp train.steps=100; "
                                       "--help-keys lists every key.")
    p.add_argument("--config", help="TOML config file (configs/*.toml); overrides win over it")
    p.add_argument("--nproc", type=int, default=None, help="processes (ranks) per node; default: 2, or 1 for strategy single")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=0, help="rendezvous port (required with --nnodes > 1)")
    p.add_argument("--max-restarts", type=int, default=0, help="torchrun restarts after a rank failure; "
                                                                 "a restarted job resumes from the latest checkpoint "
                                                                 "(a fault-tolerant replica: restarted alone, rejoins)")
    p.add_argument("--out", help="run directory (default runs/<time>-<strategy>)")
    p.add_argument("--oversubscribe", action="store_true", help="start more than 4 ranks per core of this host "
                   "(refused otherwise; a launch that would not fit the memory is refused either way: docs/training.md)")
    p.add_argument("--break-lock", action="store_true", help="take over the run directory's lock although "
                                                             "it is held from another host (see docs/training.md)")
    p.add_argument("--help-keys", action="store_true", help="list every config key: default, allowed values, what it does")
    p.add_argument("--dry-run", action="store_true", help="one simulated step of the layout as chosen ranks of "
                   "--world N, in this process: nothing allocated, no GPU (docs/dry-run.md)")
    p.add_argument("--world", type=int, default=None, help="--dry-run: the job's whole size (nproc x nnodes)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="--dry-run: the device simulated")
    p.add_argument("--ranks", default=None, help="--dry-run: all, or r,r,... (default: rank 0 and one rank of "
                   "every pipeline stage)")
    p.add_argument("--json", action="store_true", help="--dry-run: the last stdout line is one JSON object")
    p.add_argument("--device-memory", default=None, help="--dry-run: the device's memory (bytes, 80GB, 80GiB, or "
                   "a cluster preset: H100-SXM, A100-80G, H200); a rank whose build or step peak exceeds it is a "
                   "violation")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


def cmd_train(argv: list[str]) -> int:
    from shardlab import config as config_mod
    from shardlab.launch import interrupt
    from shardlab.launch import launcher as launch
    from shardlab.launch import failure, orphans, pipes

    if launch.under_torchrun():  # a rank: dies with its agent; SIGINT/SIGTERM stop it at a step boundary
        orphans.die_with_parent(os.environ.get(orphans.PARENT_ENV))
        interrupt.install()
        if orphans.PARENT_ENV in os.environ:  # started by shardlab's launcher, whose verdict names the echoes
            failure.quiet_echoes()
    try:
        args = train_parser().parse_intermixed_args(argv)
    except SystemExit as e:  # --help (0) or a usage error, already printed as one line (2)
        return e.code if isinstance(e.code, int) else 2
    if args.help_keys:  # a listing, not a run: under `| head` it stops as a filter does (141, main())
        print(config_mod.help_keys())
        return 0
    if args.dry_run or args.world is not None:
        return _dry_run(args)
    pipes.survive_closed_pipes()  # `shardlab train | head`: the run goes on when its reader stops reading
    try:
        cfg, resumed, derived_batch, corpus = _train_config(args)
    except config_mod.ConfigError as e:
        return fail(str(e))
    if launch.under_torchrun():
        return _train_rank(args, cfg, resumed)
    return _launch_train(args, cfg, resumed, derived_batch, corpus)


def _train_config(args) -> tuple:
    """The run's config, resolved and validated for its world, the data and the resume checked: (cfg, the
    resumed run or None, whether the global batch was derived from the layout, the corpus). Bad input raises
    ConfigError, before anything is written."""
    from shardlab import config as config_mod
    from shardlab.launch import launcher as launch

    cfg = config_mod.load(args.config, args.overrides)
    intact = _verify_resume(cfg, args)  # a damaged checkpoint is named before anything is written
    resumed = _resume_base(cfg, args, intact)  # resuming a run: its config.toml is the base, overrides on top
    if resumed is not None:
        cfg = resumed["cfg"]
    if launch.under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
    else:
        if args.nproc is None:
            args.nproc = 1 if cfg.parallel.strategy == "single" else 2
        if args.nproc < 1 or args.nnodes < 1 or args.max_restarts < 0:
            raise config_mod.ConfigError("--nproc and --nnodes must be at least 1, --max-restarts at least 0")
        if args.nnodes > 1 and not args.master_port:
            raise config_mod.ConfigError("--nnodes > 1 needs --master-addr and --master-port of node 0")
        world = args.nproc * args.nnodes
    derived_batch = cfg.train.global_batch == 0  # (validate fills it in from the layout)
    if cfg.parallel.layout == "auto":  # the planner's choice, written into the layout keys before launch
        from shardlab.cli.auto_layout import resolve as resolve_layout
        resolve_layout(cfg, world)
        derived_batch = False  # fixed for every candidate: the start line must not call it derived
    cfg = config_mod.validate(cfg, world)
    corpus = _check_data(cfg)
    from shardlab.checkpoint import check_resume
    check_resume(cfg, corpus.samples)  # a bad ckpt.resume=PATH is bad input too
    if not launch.under_torchrun():  # ranks this host cannot hold: refused before any starts (launch/fit.py)
        from shardlab.launch import fit
        fit.check(cfg, args.nproc, args.nnodes, args.oversubscribe)
    return cfg, resumed, derived_batch, corpus


def _train_rank(args, cfg, resumed) -> int:
    """A rank torchrun started: the run directory, then the trainer."""
    from shardlab.launch import interrupt
    from shardlab.launch import launcher as launch

    interrupt.install(cfg.ckpt.signal_grace_s)
    run_dir = Path(args.out) if args.out else launch.default_run_dir(cfg.parallel.strategy)
    if resumed is not None:
        _announce(resumed, cfg, int(os.environ["WORLD_SIZE"]), run_dir)
    if int(os.environ.get("RANK", 0)) == 0:
        launch.write_config(run_dir, cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    from shardlab.train import main as train_main
    train_main(cfg, run_dir)
    return 0


def _launch_train(args, cfg, resumed, derived_batch: bool, corpus) -> int:
    """The launcher: the run directory (its lock), the start lines, then the ranks (launch/launcher.py)."""
    from shardlab.launch import launcher as launch

    if args.out:
        run_dir = Path(args.out)
    elif args.nnodes > 1:  # every node's launcher must pick the same name without talking
        run_dir = Path("runs") / f"multinode-{args.master_port}-{cfg.parallel.strategy}"
    else:
        run_dir = launch.default_run_dir(cfg.parallel.strategy)
    if resumed is not None:
        from shardlab.launch import runlock
        try:  # before config_history/ is written; the launcher then takes the lock (launch.launch)
            if args.node_rank == 0:  # only node 0 takes it: the other nodes' launchers join node 0's run
                runlock.refuse_if_held(run_dir)
        except runlock.RunLocked as e:
            return fail(str(e))
        _announce(resumed, cfg, args.nproc * args.nnodes, run_dir)
    from shardlab.launch import notes as launch_notes, runlock
    try:
        if args.node_rank == 0 and not getattr(args, "break_lock", False):
            runlock.refuse_if_held(run_dir)  # a refused run prints its refusal only, not the start lines
        launch_notes.say_before_launch(cfg, args, run_dir, derived_batch, sys.stderr, corpus)  # at once, whatever the ranks take
        return launch.launch(args, cfg, run_dir, _train_main)
    except launch.RunLocked as e:
        return fail(str(e))


def _train_main(cfg, run_dir) -> None:
    """The trainer, imported only where this process trains (one process, a lone replica): like every import
    of torch here it is deferred, so `shardlab --help`, bad input and the launcher of a multi-rank run
    answer without loading torch (seconds on every launch)."""
    from shardlab.train import main

    main(cfg, run_dir)


def _dry_run(args) -> int:
    """`--dry-run --world N`: shardlab.simulate.dry_run (exit 0 clean, 6 violations, 2 bad input)."""
    from shardlab import config as config_mod

    try:
        if not args.dry_run:
            raise config_mod.ConfigError("--world is the simulated job's size: it goes with --dry-run")
        if args.world is None:
            raise config_mod.ConfigError("--dry-run needs --world N (the job's whole size, nproc x nnodes)")
        if args.nproc is not None or args.nnodes != 1:
            raise config_mod.ConfigError("--world is the whole job (nproc x nnodes): give it instead of --nproc "
                                         "and --nnodes, not beside them")
        if args.world < 1:
            raise config_mod.ConfigError(f"--world {args.world}: must be at least 1")
        cfg = config_mod.load(args.config, args.overrides)
        if cfg.parallel.layout == "auto":  # the layout the run would train, chosen on this machine's profile
            from shardlab.cli.auto_layout import resolve as resolve_layout
            resolve_layout(cfg, args.world)
        cfg = config_mod.validate(cfg, args.world)
        from shardlab.simulate.dry_run import run
        return run(cfg, args.world, args.device, args.ranks, args.json, args.device_memory)
    except config_mod.ConfigError as e:
        return fail(str(e))


def _verify_resume(cfg, args):
    """The checkpoint a resume will load, every checksum rechecked, or None (a fresh start). Raises a
    CheckpointError (exit 2) when the run has checkpoints and none is intact. The ranks a launcher
    starts skip it (the launcher did it); a rank of a plain `torchrun -m shardlab train` does it too."""
    from shardlab.launch import launcher as launch
    from shardlab.checkpoint.resume_path import verify_before_resume

    if launch.under_torchrun() and os.environ.get("SHARDLAB_RESUME_ANNOUNCED"):
        return None
    return verify_before_resume(cfg.ckpt.resume, args.out)


def _resume_base(cfg, args, intact=None) -> dict | None:
    """When ckpt.resume points at a run (or --out RUN with ckpt.resume=latest): rebuild the config on
    that run's config.toml and default the world size to the checkpoint's (see shardlab.launch.resume).
    `intact`: the checkpoint verify_before_resume found (an older one when the newest is damaged)."""
    from shardlab import config as config_mod
    from shardlab.launch import launcher as launch
    from shardlab.launch import resume

    run = resume.source_run(cfg.ckpt.resume, args.out)
    if run is None:
        return None
    stored = resume.stored_config(run)
    new = config_mod.load(args.config, args.overrides, base=resume.base_config(stored))
    checkpoint = intact or resume.checkpoint_of(new.ckpt.resume, run)
    world = resume.saved_world(checkpoint)
    if args.nproc is None and world and not launch.under_torchrun() and world % args.nnodes == 0:
        args.nproc = world // args.nnodes
    return {"run": run, "stored": stored, "cfg": new, "world": world, "checkpoint": checkpoint}


def _announce(resumed: dict, cfg, world: int, run_dir: Path) -> None:
    from shardlab.launch import resume

    resume.announce(resumed["run"], resumed["stored"], cfg, resumed["world"], world, resumed["checkpoint"], run_dir)


def cmd_resume(argv: list[str]) -> int:
    """`shardlab resume RUN [train options] [key=value ...]` = `shardlab train --out RUN ckpt.resume=latest ...`"""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: shardlab resume RUN [--nproc N] [--max-restarts K] [key=value ...]\n\n"
              "Continue RUN from its latest checkpoint with RUN's own config (config.toml) and the world size it\n"
              "was saved at; key=value overrides go on top, and every difference is printed first (those that\n"
              "change the trajectory are named). The replaced config.toml is kept in RUN/config_history/.")
        return 0 if argv else 2
    run, rest = Path(argv[0]), argv[1:]
    if run.name.startswith("-"):
        return fail(f"shardlab resume: the first argument must be the run directory, got {argv[0]!r}")
    if "--out" in rest or any(a.startswith("--out=") for a in rest):
        return fail("shardlab resume writes into RUN itself; to continue elsewhere use "
                    "`shardlab train --out NEW ckpt.resume=RUN`")
    from shardlab.launch import runlock
    try:
        runlock.refuse_if_held(run)
    except runlock.RunLocked as e:
        return fail(str(e))
    if not (run / "config.toml").is_file():
        return fail(f"{run} is not a run directory (no config.toml); `shardlab resume` takes the directory a "
                    "`shardlab train` run wrote")
    from shardlab.checkpoint import manifest as mf
    try:
        mf.resolve(run)
    except FileNotFoundError as e:
        return fail(f"nothing to resume: {e}")
    if not any(not c.path.name.endswith(".tmp") for c in mf.list_checkpoints(run / "checkpoints")):
        return fail(f"nothing to resume: {run}/checkpoints has no committed checkpoint")
    # (a step directory without its manifest is a damaged checkpoint: cmd_train names it, exit 2)
    return cmd_train(["--out", str(run), "ckpt.resume=latest", *rest])


def _check_data(cfg):
    """Open the corpus before anything is written, so a bad data.source is a clean exit 2; the model's
    vocabulary follows the tokenizer's unless model.vocab_size is set. Returns the corpus (its numbers go
    into the start line) with `samples`, the number of training sequences."""
    from shardlab.config import ConfigError, init_from
    from shardlab.data import DataError, TokenDataset, check_vocab
    from shardlab.data.tokens import follow_vocab, open_corpus
    from shardlab.model.configs import resolve_model_config

    try:
        corpus = open_corpus(cfg.data.source, cfg.data.tokenizer, cfg.data.val_fraction, cfg.data.doc_mask)
        follow_vocab(cfg.model, corpus.tokenizer)
        init_from.check_tokenizer(cfg, corpus.tokenizer)
        if cfg.data.source.startswith("bin:"):  # ids the tokenizer did not write itself: check them all
            check_vocab(corpus.train, resolve_model_config(cfg.model, cfg.train.seq_len).vocab_size)
        train_ds = TokenDataset(corpus.train, cfg.train.seq_len, name="training split")
        TokenDataset(corpus.val, cfg.train.seq_len, name="validation split")
    except DataError as e:
        raise ConfigError(str(e)) from None
    corpus.samples = len(train_ds)
    # fault-tolerant replicas are separate jobs, each taking its slice of an R-times larger global batch
    needed = cfg.train.global_batch * (cfg.parallel.replicas if cfg.parallel.fault_tolerant else 1)
    if len(train_ds) < needed:
        raise ConfigError(f"data.source={cfg.data.source!r} has {len(train_ds)} training sequences of "
                          f"{cfg.train.seq_len} tokens, fewer than one global batch ({needed})")
    return corpus


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except BrokenPipeError:
        # `shardlab ... | head` closed the pipe: stop quietly, as a Unix filter does, instead of a traceback.
        # Point stdout at /dev/null so the interpreter's final flush does not raise a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a filter killed by the closed pipe
    except KeyboardInterrupt:
        # Ctrl-C before anything launched (a calibration for layout=auto or explain, a plan search, a prepare:
        # each writes its files whole or not at all): one line and 128 + SIGINT, not a traceback. A launched
        # run handles its signals itself (launch/: save at a step boundary, exit 130).
        print("shardlab: interrupted", file=sys.stderr, flush=True)
        sys.exit(130)


def _main(argv: list[str] | None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    command, rest = argv[0], argv[1:]
    if command == "train":
        sys.exit(cmd_train(rest))
    if command == "resume":
        sys.exit(cmd_resume(rest))
    if command in SUBCOMMANDS:
        try:
            module = importlib.import_module(SUBCOMMANDS[command])
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("shardlab"):
                sys.exit(fail(f"'shardlab {command}' is not available in this build"))
            raise
        sys.exit(module.main(rest))
    sys.exit(fail(f"unknown command {command!r}; expected one of train, resume, {', '.join(SUBCOMMANDS)}"))
