"""One entry point: shardlab train | bench | trace | ckpt | doctor | plan.

Bad input anywhere -> one clear line on stderr and exit code 2, with nothing written.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

# Subcommands owned by their packages: each exposes main(argv) -> int.
SUBCOMMANDS = {
    "bench": "shardlab.bench.cli",
    "trace": "shardlab.observe.cli",
    "ckpt": "shardlab.checkpoint.cli",
    "doctor": "shardlab.doctor.cli",
    "plan": "shardlab.plan.cli",
}

USAGE = """usage: shardlab {train,bench,trace,ckpt,doctor,plan} ...

  train    train a GPT with a data-parallel strategy          (shardlab train --help)
  bench    run a benchmark suite and write a report           (shardlab bench --help)
  trace    analyse a traced run: overlap, exposed comm, skew  (shardlab trace RUN)
  ckpt     list, verify, inspect, export checkpoints          (shardlab ckpt --help)
  doctor   diagnose hangs and anomalies                       (shardlab doctor --help)
  plan     predict memory, traffic and step time at scale     (shardlab plan --help)
"""


def fail(message: str) -> int:
    print(f"shardlab: error: {message}", file=sys.stderr)
    return 2


def train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shardlab train", description="Train a GPT with a data-parallel strategy.",
                                epilog="Overrides are key=value, e.g. parallel.strategy=ddp train.steps=100; "
                                       "--help-keys lists every key.")
    p.add_argument("--config", help="TOML config file (configs/*.toml); overrides win over it")
    p.add_argument("--nproc", type=int, default=None, help="processes (ranks) per node; default: 2, or 1 for strategy single")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=0, help="rendezvous port (required with --nnodes > 1)")
    p.add_argument("--max-restarts", type=int, default=0, help="torchrun restarts after a rank failure; "
                                                                 "a restarted job resumes from the latest checkpoint")
    p.add_argument("--out", help="run directory (default runs/<time>-<strategy>)")
    p.add_argument("--help-keys", action="store_true", help="list every config key with its default")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    return p


def cmd_train(argv: list[str]) -> int:
    from shardlab import config as config_mod
    from shardlab import launch

    args = train_parser().parse_intermixed_args(argv)
    if args.help_keys:
        defaults = config_mod.Config()
        for key in config_mod.all_keys():
            print(f"{key} = {config_mod.get_key(defaults, key)!r}")
        return 0
    try:
        cfg = config_mod.load(args.config, args.overrides)
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
        config_mod.validate(cfg, world)
        num_samples = _check_data(cfg)
        from shardlab.checkpoint import check_resume
        check_resume(cfg, num_samples)  # a bad ckpt.resume=PATH is bad input too
    except config_mod.ConfigError as e:
        return fail(str(e))

    if launch.under_torchrun():
        run_dir = Path(args.out) if args.out else launch.default_run_dir(cfg.parallel.strategy)
        if int(os.environ.get("RANK", 0)) == 0:
            launch.write_config(run_dir, cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        from shardlab.train.trainer import main as train_main
        train_main(cfg, run_dir)
        return 0
    if args.out:
        run_dir = Path(args.out)
    elif args.nnodes > 1:  # every node's launcher must pick the same name without talking
        run_dir = Path("runs") / f"multinode-{args.master_port}-{cfg.parallel.strategy}"
    else:
        run_dir = launch.default_run_dir(cfg.parallel.strategy)
    return launch.launch(args, cfg, run_dir)


def _check_data(cfg) -> int:
    """Open the corpus before anything is written, so a bad data.source is a clean exit 2.
    Returns the number of training sequences."""
    from shardlab.config import ConfigError
    from shardlab.data import DataError, TokenDataset, load_tokens, split_train_val, check_vocab
    from shardlab.model.gpt import resolve_model_config

    try:
        tokens = load_tokens(cfg.data.source)
        check_vocab(tokens, resolve_model_config(cfg.model, cfg.train.seq_len).vocab_size)
        train, val = split_train_val(tokens, cfg.data.val_fraction)
        train_ds = TokenDataset(train, cfg.train.seq_len, name="training split")
        TokenDataset(val, cfg.train.seq_len, name="validation split")
    except DataError as e:
        raise ConfigError(str(e)) from None
    if len(train_ds) < cfg.train.global_batch:
        raise ConfigError(f"data.source={cfg.data.source!r} has {len(train_ds)} training sequences of "
                          f"{cfg.train.seq_len} tokens, fewer than one global batch ({cfg.train.global_batch})")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    command, rest = argv[0], argv[1:]
    if command == "train":
        sys.exit(cmd_train(rest))
    if command in SUBCOMMANDS:
        try:
            module = importlib.import_module(SUBCOMMANDS[command])
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("shardlab"):
                sys.exit(fail(f"'shardlab {command}' is not available in this build"))
            raise
        sys.exit(module.main(rest))
    sys.exit(fail(f"unknown command {command!r}; expected one of train, {', '.join(SUBCOMMANDS)}"))
