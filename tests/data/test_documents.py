"""Packed documents (data/documents.py, model/documents.py, data.doc_mask): the per-token positions, the
single-device parity (each document of a packed, masked sample has the per-token losses and the gradient
it has alone), the validation loss a run computes with the masks (each document of the evaluated sequences
scored alone), what is refused, and a `shardlab train` run on a corpus of EOS-separated documents.
The parity under tp+sp, pp and cp: tests/parallel/{tp,pp,cp}/test_*_docmask.py (docmask_harness)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shardlab import config
from shardlab.config import ConfigError
from shardlab.data import TokenDataset
from shardlab.data.documents import count_documents, doc_positions, eos_id_of, packed_batch
from shardlab.model.documents import block_causal_mask
from shardlab.testing.cli import run_cli
from shardlab.testing.compare import assert_float64_equal, in_float64
from cli_harness import as_rank
from docmask_harness import _cfg, alone_losses, documents, packed_batch as fixed_batch, packed_losses


def test_positions_restart_after_every_eos_which_ends_its_document():
    x = torch.tensor([[5, 6, 0, 7, 8, 9, 0, 4], [0, 0, 3, 3, 3, 3, 3, 0]])
    assert doc_positions(x, 0).tolist() == [[0, 1, 2, 0, 1, 2, 3, 0], [0, 0, 0, 1, 2, 3, 4, 5]]
    assert doc_positions(x, 99).tolist() == [list(range(8))] * 2  # no EOS: one document per sample
    mask = block_causal_mask(doc_positions(x[:1], 0))[0, 0]
    assert mask[4].tolist() == [False, False, False, True, True, False, False, False]  # its document, causal
    assert mask.diagonal().all()  # every token sees itself: no softmax row is ever empty


def test_packed_batch_adds_positions_only_when_asked_and_documents_are_counted():
    tokens = np.array([1, 2, 0, 3, 0, 4, 5, 6, 0, 7], dtype=np.uint16)
    ds = TokenDataset(tokens, seq_len=4)
    x, y = packed_batch(ds, [0, 1])
    x2, y2, pos = packed_batch(ds, [0, 1], eos_id=0)
    assert torch.equal(x, x2) and torch.equal(y, y2) and pos.tolist() == [[0, 1, 2, 0], [0, 0, 1, 2]]
    assert count_documents(tokens, 0) == 4 and count_documents(tokens[:9], 0) == 3
    assert eos_id_of(config.Config()) == 0  # the bytes tokenizer's: NUL, which no text contains


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_single_device_each_document_has_its_own_losses_and_gradient(arch):
    """Per-token losses to compare.py's FP64_TOL (another order of the same sums, ~1e-15; see
    docmask_harness). Without the mask the same packed sample is far off (the test can fail), and the
    gradient of the packed sample's loss is the sum of the documents' gradients alone."""
    alone = in_float64(alone_losses, arch)
    assert_float64_equal(in_float64(packed_losses, arch, []), alone, "per-token losses")
    in_float64(_gradients_match, arch, alone)


def _gradients_match(arch: str, alone: torch.Tensor) -> None:
    from shardlab.model.gpt import build_model, resolve_model_config

    cfg = _cfg(arch, [])
    model = build_model(resolve_model_config(cfg.model, cfg.train.seq_len), cfg.train.seed)
    x, y = fixed_batch()
    unmasked = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none").detach()
    assert (unmasked - alone).abs().max() > 1e-3  # documents that see their neighbours score otherwise
    F.cross_entropy(model(x, doc_pos=doc_positions(x, 0)).transpose(1, 2), y, reduction="sum").backward()
    packed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    for r, s, e in documents(x):
        F.cross_entropy(model(x[r:r + 1, s:e])[0], y[r, s:e], reduction="sum").backward()
    assert_float64_equal(packed, {n: p.grad for n, p in model.named_parameters()}, "gradients")


@pytest.mark.parametrize("overrides,message", [
    (["parallel.cp=2", "parallel.cp_impl=torch"], "data.doc_mask=true with parallel.cp_impl=torch"),
    (["parallel.pp=2", "parallel.pp_schedule=torch-1f1b"], "data.doc_mask=true with parallel.pp_schedule=torch-1f1b"),
    (["parallel.tp=2", "parallel.tp_impl=dtensor"], "data.doc_mask=true with parallel.tp_impl=dtensor"),
])
def test_layouts_that_cannot_carry_document_masks_are_refused(overrides, message):
    cfg = config.load(None, ["model.preset=tiny", "train.seq_len=32", "train.grad_accum=2", "data.doc_mask=true",
                             *overrides])
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        cfg = config.validate(cfg, 2)


def test_cli_refuses_torch_ring_with_document_masks_in_one_line(tmp_path):
    out = run_cli(["train", "--nproc", "2", "--out", str(tmp_path / "run"), "model.preset=tiny", "parallel.cp=2",
                   "parallel.cp_impl=torch", "data.doc_mask=true", "train.seq_len=32"], timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.doc_mask=true with parallel.cp_impl=torch" in lines[0], out.stderr
    assert not (tmp_path / "run").exists()


def test_train_on_eos_separated_documents(tmp_path, pool2):
    """`shardlab train data.doc_mask=true` on a bin: corpus of documents ended by EOS (0) trains and
    evaluates with the masks (finite losses); data.doc_mask=false on the same corpus is another run. Both are
    what each rank of the 2-rank run (the default world) runs, on the session's pool (tests/drivers/cli_harness.py)."""
    gen = np.random.default_rng(0)
    docs = [np.append(gen.integers(97, 123, int(n)), 0) for n in gen.integers(5, 60, 400)]
    np.concatenate(docs).astype(np.uint16).tofile(tmp_path / "docs.bin")
    args = ["train", "model.preset=tiny", f"data.source=bin:{tmp_path / 'docs.bin'}", "train.seq_len=32",
            "train.steps=6", "train.micro_batch=4", "train.eval_every=3", "train.eval_seqs=8", "train.log_every=1",
            "ckpt.final=false", "train.warmup_steps=1"]
    runs = {}
    for mask in ("true", "false"):
        ranks = pool2.run(as_rank, args + ["--out", str(tmp_path / mask), f"data.doc_mask={mask}"], timeout=300)
        assert [code for code, _, _ in ranks] == [0, 0], [err[-2000:] for _, _, err in ranks]
        runs[mask] = json.loads((tmp_path / mask / "summary.json").read_text())
    for s in runs.values():
        assert np.isfinite(s["final_train_loss"]) and np.isfinite(s["final_val_loss"])
    assert runs["true"]["final_train_loss"] != runs["false"]["final_train_loss"]
    assert (tmp_path / "true" / "config.toml").read_text().count("doc_mask = true") == 1


@pytest.mark.parity
def test_validation_with_doc_mask_equals_each_document_scored_alone(tmp_path):
    """data.doc_mask=true's validation loss (train/evaluate.py, as the run computes it) is the token-weighted
    loss of every document of the evaluated sequences scored alone, in float64 to FP64_TOL (another order of
    the same sums); without the masks the same sequences score measurably otherwise (so the test can fail)."""
    from docmask_harness import alone_val_loss, trainer_val_losses, write_documents
    write_documents(tmp_path / "docs.bin")
    got = in_float64(trainer_val_losses, tmp_path / "run", tmp_path / "docs.bin", ["parallel.strategy=single"])
    alone = in_float64(alone_val_loss, tmp_path / "docs.bin")
    assert_float64_equal([got["masked"]], [alone], "validation loss with document masks")
    assert abs(got["unmasked"] - alone) > 1e-4  # documents that see their neighbours score otherwise


@pytest.mark.parity
def test_validation_with_doc_mask_at_dp2_and_pp2_equals_each_document_alone(pool2, tmp_path):
    """The same at world 2: the validation sequences split over two data-parallel ranks, and a pipeline
    whose evaluation forward hands the positions to each stage (its own eval path)."""
    from docmask_harness import alone_val_loss, trainer_val_losses, write_documents
    write_documents(tmp_path / "docs.bin")
    alone = in_float64(alone_val_loss, tmp_path / "docs.bin")
    for layout in (["parallel.strategy=ddp", "train.global_batch=4"],
                   ["parallel.strategy=ddp", "parallel.pp=2", "train.grad_accum=2", "train.global_batch=4"]):
        for r in pool2.run(in_float64, trainer_val_losses, tmp_path / "run", tmp_path / "docs.bin", layout,
                           timeout=300):
            assert_float64_equal([r["masked"]], [alone], f"{layout} validation loss with document masks")
