"""`shardlab generate` under tp or pp > 1: each rank reads only its part, never the whole model, measured.

Every storage a rank allocates on the host while generation builds and loads its part (engine.compose from
a path: the meta build, this rank's allocation, the reads) is traced as tests/parallel/test_meta_build.py
traces the training build (tests/drivers/storage_trace.py), from a shardlab checkpoint (DCP) and from a
Hugging Face directory (safetensors slices). The peak stays under a cap below the whole model: the rank's
half, and one whole stored tensor beside it (a checkpoint written at another layout stores a parameter as
one chunk, which DCP reads, then narrows). Before, every rank built and loaded the whole model.
"""
from __future__ import annotations

import json

import pytest
import torch

from storage_trace import StorageTrace
from shardlab.model.gpt import GPTConfig, build_model

# 8 blocks of d=128 (tests/parallel/test_meta_build.py's size): the blocks dominate, the largest single
# parameter (128 x 512) is ~1/50 of the model
CFG = GPTConfig(n_layer=8, n_head=4, d_model=128, vocab_size=256, max_seq_len=64)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    from safetensors.torch import save_file

    from shardlab.checkpoint import cli, hf

    root = tmp_path_factory.mktemp("peak")
    model = build_model(CFG, 5)
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    (root / "hf").mkdir()
    save_file(hf.to_hf(sd, CFG.n_layer), str(root / "hf" / "model.safetensors"), metadata={"format": "pt"})
    m = {k: getattr(CFG, k) for k in ("n_layer", "n_head", "d_model", "vocab_size", "max_seq_len")}
    (root / "hf" / "config.json").write_text(json.dumps(hf.hf_config(m)))
    assert cli.main(["import", "--hf", str(root / "hf"), "--out", str(root / "ck")]) == 0
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    return {"hf": root / "hf", "checkpoint": root / "ck"}, sum(sizes), max(sizes)


def load_peak(path: str, tp: int, pp: int) -> tuple[int, int]:
    """On every rank: (the host peak while this rank builds and loads its part, the bytes it holds)."""
    from shardlab.generate.engine import Layout, compose

    with StorageTrace() as trace:
        _, part, _ = compose(path, Layout(tp=tp, pp=pp))
    held = sum(p.numel() * p.element_size() for p in {id(p): p for p in part.parameters()}.values())
    return trace.peak, held


@pytest.mark.parametrize("source", ["checkpoint", "hf"])
@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_a_generating_rank_never_holds_the_whole_model(pool2, sources, source, tp, pp):
    paths, whole, largest = sources
    cap = whole // 2 + 2 * largest  # a rank's half, and one whole stored tensor (read, then narrowed)
    for peak, held in pool2.run(load_peak, str(paths[source]), tp, pp, timeout=300):
        print(f"{source} tp={tp} pp={pp}: load peak {peak:,} B, held {held:,} B, whole {whole:,} B, cap {cap:,} B")
        assert peak < cap < whole, (peak, cap, whole)
        assert held < 0.6 * whole
