"""What the launcher says before it starts the ranks: warnings about a run that will be slow or will not train
as the user may think, then one line saying the ranks are starting (the batch they train, whether it was
derived from the layout, and the corpus: its tokens, documents and the epochs the run covers).

    shardlab: warning: 64 ranks x 1 thread on 2 cores: the ranks share the cores, each step about 32x as
        slow as with a core per rank; the first output may take minutes (--nproc 2 is the most this machine runs at full speed)
    shardlab: warning: train.warmup_steps=30 is longer than the run (train.steps=20): ...
    [launch] starting 64 ranks (torchrun) -> runs/x: global batch 16 sequences x 128 tokens (train.global_batch) = ...;
        data stdlib (bytes tokenizer, vocabulary 256, EOS 0): 12.1M tokens in 734 documents; 300 steps x ... cover 0.0534 epochs ...

All of it is printed by the launching process only, at once (the ranks may take minutes to say anything).
"""
from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or `taskset` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def oversubscribed(nproc: int, threads: int, ncores: int) -> str | None:
    """One line when this node's ranks want more cores than it has, else None."""
    want = nproc * threads
    if want <= ncores:
        return None
    per_core = max(1, ncores // max(threads, 1))
    return (f"shardlab: warning: {nproc} ranks x {threads} thread{'s' if threads > 1 else ''} on {ncores} "
            f"core{'s' if ncores > 1 else ''}: the ranks share the cores, so each step is about {want / ncores:.0f}x "
            f"as slow as with a core per rank and the first output may take minutes "
            f"(--nproc {per_core} is the most this machine runs at full speed)")


def warmup_longer_than_run(cfg) -> str | None:
    """One line when the learning-rate warm-up does not end within the run, else None."""
    t = cfg.train
    if t.warmup_steps <= t.steps:
        return None
    peak = t.lr * t.steps / t.warmup_steps  # lr_at(steps - 1): the last step's learning rate
    return (f"shardlab: warning: train.warmup_steps={t.warmup_steps} is longer than the run "
            f"(train.steps={t.steps}): the learning rate rises only to {peak:.3g} (train.lr={t.lr:g}) and never "
            f"decays; set train.warmup_steps below train.steps")


def start_line(cfg, nproc: int, nnodes: int, run_dir, derived_batch: bool) -> str:
    """`[launch] starting N ranks ... -> RUN: global batch ...` (the batch is what makes layouts comparable)."""
    t = cfg.train
    world = nproc * nnodes
    how = "in this process" if world == 1 else "torchrun" + (f", {nnodes} nodes" if nnodes > 1 else "")
    dp = t.global_batch // (t.micro_batch * t.grad_accum)
    split = f"micro_batch {t.micro_batch} x grad_accum {t.grad_accum} x {dp} data-parallel rank{'s' if dp > 1 else ''}"
    if derived_batch:
        batch = (f"global batch {t.global_batch} sequences x {t.seq_len} tokens, derived from this layout "
                 f"(train.global_batch=0: {split}): another --nproc or layout trains another batch; set "
                 "train.global_batch to compare layouts")
    else:
        batch = f"global batch {t.global_batch} sequences x {t.seq_len} tokens (train.global_batch) = {split}"
    return f"[launch] starting {world} rank{'s' if world > 1 else ''} ({how}) -> {run_dir}: {batch}"


def say_before_launch(cfg, args, run_dir, derived_batch: bool, file, corpus=None) -> None:
    for line in (oversubscribed(args.nproc, cfg.train.threads, cores()), warmup_longer_than_run(cfg)):
        if line:
            print(line, file=file)
    line = start_line(cfg, args.nproc, args.nnodes, run_dir, derived_batch)
    if corpus is not None:
        line += "; " + data_clause(cfg, corpus)
    print(line, file=file, flush=True)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n:,}"


def data_clause(cfg, corpus) -> str:
    """`data SOURCE (TOKENIZER tokenizer, vocabulary V, EOS E): T tokens in D documents; S steps x ... cover
    N epochs of the training split` (data.tokens.Corpus; an epoch is whole global batches, as the sampler
    takes them)."""
    t, tok = cfg.train, corpus.tokenizer
    per_epoch = corpus.samples // t.global_batch if t.global_batch else 0
    epochs = t.steps / per_epoch if per_epoch else float("inf")
    return (f"data {corpus.source} ({tok.spec} tokenizer, vocabulary {tok.vocab_size:,}, EOS {tok.eos_id}): "
            f"{_count(corpus.tokens)} tokens in {corpus.documents:,} document{'s' if corpus.documents != 1 else ''}; "
            f"{t.steps} steps x {t.global_batch} x {t.seq_len} tokens cover {epochs:.3g} epochs of the training "
            f"split ({corpus.samples:,} sequences)")
