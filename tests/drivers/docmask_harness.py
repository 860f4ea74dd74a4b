"""Rank-side helpers for the packed-document tests (data.doc_mask): a fixed packed batch, the per-token
losses of its documents run alone on one bare model, the per-token losses of the packed batch through
`parallel.build`'s Parallel at any layout, and a few training steps on packed batches.

The packed batch (2 rows of 32 tokens, EOS = 0) is made to hit the cases that matter: documents of
several lengths, a one-token document (an EOS right after an EOS), a sample starting mid-document, and
under cp=2 (zigzag chunks of 8: rank 0 holds 0-7 and 24-31, rank 1 8-23) documents crossing chunk
boundaries, so the ring sees query rows with no key at all in whole blocks (log-sum-exp -inf)."""
from __future__ import annotations

import torch

SEQ = 32
EOS_AT = {0: (4, 17, 18), 1: (26,)}  # row -> indices of the inputs that are EOS
BASE = ["train.seq_len=32", "train.micro_batch=1", "train.grad_accum=2", "train.global_batch=2",
        "train.lr=0.001", "train.grad_clip=1.0", "ckpt.final=false", "data.doc_mask=true"]
PRESETS = {"gpt2": "model.preset=tiny", "llama": "model.preset=llama-tiny"}


def packed_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y), (2, SEQ) each: random non-EOS tokens with EOS at EOS_AT (and at two targets)."""
    gen = torch.Generator().manual_seed(5)
    rows = torch.randint(1, 256, (2, SEQ + 1), generator=gen)
    for r, where in EOS_AT.items():
        rows[r, list(where)] = 0
    return rows[:, :-1], rows[:, 1:]


def documents(x: torch.Tensor) -> list[tuple[int, int, int]]:
    """(row, start, end) of every document in the packed inputs (an EOS ends its document)."""
    out = []
    for r in range(x.shape[0]):
        ends = [i + 1 for i in range(x.shape[1]) if int(x[r, i]) == 0]
        bounds = [0, *[e for e in ends if e < x.shape[1]], x.shape[1]]
        out += [(r, s, e) for s, e in zip(bounds[:-1], bounds[1:])]
    return out


def _cfg(arch: str, overrides: list[str]):
    from shardlab import comm, config

    cfg = config.load(None, BASE + [PRESETS[arch]] + overrides)
    cfg = config.validate(cfg, comm.world_size() if comm.is_initialized() else 1)
    return cfg


def alone_losses(arch: str, model_keys: list[str] = ()) -> torch.Tensor:
    """(2, SEQ) per-token losses with every document run alone (its own sample, positions from 0, plain
    causal attention) on the bare model `parallel.build` starts from."""
    import torch.nn.functional as F
    from shardlab.model.gpt import build_model, resolve_model_config

    cfg = _cfg(arch, list(model_keys))
    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed)
    x, y = packed_batch()
    out = torch.zeros(x.shape, dtype=torch.float64)
    with torch.no_grad():
        for r, s, e in documents(x):
            logits = model(x[r:r + 1, s:e])
            out[r, s:e] = F.cross_entropy(logits[0], y[r, s:e], reduction="none")
    return out


def packed_losses(arch: str, overrides: list[str]) -> torch.Tensor | None:
    """(2, SEQ) per-token losses of the packed batch with its document positions, through the layout's
    `eval_loss_sum`: token (r, t) alone is scored (every other target ignored, -100), so what any layer
    sums over (the vocabulary, the sequence chunks, the pipeline) is that one token's loss. Rank 0 returns it."""
    from shardlab import comm
    from shardlab.data.documents import doc_positions
    from shardlab.parallel import build

    cfg = _cfg(arch, overrides)
    par = build(cfg, comm.device())
    x, y = packed_batch()
    pos = doc_positions(x, 0)
    out = torch.zeros(x.shape, dtype=torch.float64)
    par.module.eval()
    for r in range(x.shape[0]):
        for t in range(x.shape[1]):
            one = torch.full_like(y, -100)
            one[r, t] = y[r, t]
            out[r, t] = float(par.sum_over_data(par.eval_loss_sum(x, one, pos).double(), "doc"))
    return out if comm.rank() == 0 else None


def train_packed(arch: str, overrides: list[str], steps: int = 3) -> dict | None:
    """`steps` optimizer steps on the packed batch (two microbatches: its rows), the loss weight over the
    ranks that saw different tokens as the trainer's. Rank 0 returns the losses, norms and full parameters."""
    import step_driver as driver
    from shardlab import comm
    from shardlab.data.documents import doc_positions
    from shardlab.parallel import build

    cfg = _cfg(arch, overrides)
    par = build(cfg, comm.device())
    x, y = packed_batch()
    pos = doc_positions(x, 0)
    micro = [(x[i:i + 1], y[i:i + 1], pos[i:i + 1]) for i in range(2)]
    tokens = x.numel()
    out = {"losses": [], "norms": []}
    for _ in range(steps):
        res, loss = driver.step(par, micro, tokens, cfg.train.grad_clip, double=True)
        out["losses"].append(loss)
        out["norms"].append(res.grad_norm)
    mine = {k: v.detach().clone() for k, v in par.full_parameters().items()}
    out["params"] = {}
    for held in (comm.all_gather_object(mine) if comm.is_initialized() else [mine]):
        out["params"].update(held)  # a pipeline stage holds its own blocks only
    return out if comm.rank() == 0 else None


def assert_layout_parity(pool, arch: str, overrides: list[str], model: list[str] = ()) -> None:
    """The two checks every layout's test makes, in float64 (compare.py's FP64_TOL, 1e-9; measured worst
    1.8e-15 on the losses, 1.5e-14 on the parameters):
    1. each document's per-token losses inside the packed, masked batch equal those of the document run
       alone on one device (another order of the same sums: the masked kernel, the ring's merges, the
       vocabulary-parallel loss; round-off ~1e-15, a document seeing a neighbour's token moves a loss by >1e-3);
    2. three training steps on the packed batch equal one device's: the backward through the masks (the
       ring's, the pipeline's side inputs in every stage's backward) computes the same gradients."""
    from shardlab.testing.compare import assert_float64_equal, in_float64

    model = list(model)  # model overrides (e.g. model.n_layer) both sides share
    got = pool.run(in_float64, packed_losses, arch, overrides + model, timeout=300)[0]
    assert_float64_equal(got, in_float64(alone_losses, arch, model), "per-token losses of the packed documents")
    ref = in_float64(train_packed, arch, model)
    out = pool.run(in_float64, train_packed, arch, overrides + model, timeout=300)[0]
    for key in ("losses", "norms", "params"):
        assert_float64_equal(out[key], ref[key], key)


# --- validation with packed documents (train/evaluate.py) ------------------------------------------------
VAL = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "train.grad_accum=1", "train.eval_seqs=5",
       "data.doc_mask=true", "ckpt.final=false", "train.seed=3"]


def write_documents(path) -> None:
    """A bin: corpus of EOS-ended documents (EOS = 0, the bytes tokenizer's) of 3 to 40 tokens: every
    validation sequence of 32 holds several documents, so attending across them would show."""
    import numpy as np

    gen = np.random.default_rng(0)
    docs = [np.append(gen.integers(97, 123, int(n)), 0) for n in gen.integers(3, 40, 300)]
    np.concatenate(docs).astype(np.uint16).tofile(path)


def trainer_val_losses(run_dir, source, overrides: list[str]) -> dict:
    """The validation loss a run computes at its start (train/evaluate.py's val_loss, as the trainer calls
    it), with the document masks and, for contrast, with them dropped (doc_eos None)."""
    from shardlab import comm, config
    from shardlab.train.evaluate import val_loss
    from shardlab.train.trainer import Trainer

    cfg = config.load(None, VAL + [f"data.source=bin:{source}", *overrides])
    cfg = config.validate(cfg, comm.world_size() if comm.is_initialized() else 1)
    trainer = Trainer(cfg, run_dir)
    masked = val_loss(trainer)
    trainer.doc_eos = None
    return {"masked": masked, "unmasked": val_loss(trainer)}


def alone_val_loss(source) -> float:
    """The same validation loss from first principles: each document of each evaluated validation
    sequence scored alone (its own sample, positions from 0) on the bare model the run starts from, the
    token losses summed and divided by the tokens scored."""
    import torch.nn.functional as F

    from shardlab import config
    from shardlab.data import val_indices_for_rank
    from shardlab.data.documents import packed_batch as batch_of
    from shardlab.model.gpt import build_model, resolve_model_config
    from shardlab.train.state import datasets

    cfg = config.load(None, VAL + [f"data.source=bin:{source}"])
    cfg = config.validate(cfg, 1)
    _, val = datasets(cfg)
    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed).eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for i in val_indices_for_rank(len(val), 1, 0, limit=cfg.train.eval_seqs):  # the evenly spaced set
            x, y = batch_of(val, [i])
            for r, s, e in documents(x):
                total += float(F.cross_entropy(model(x[r:r + 1, s:e])[0], y[r, s:e], reduction="sum"))
                tokens += e - s
    return total / tokens
