"""Pipeline parallelism with packed documents (data.doc_mask): the document positions are the pipeline's
side input, handed from the batch to every stage's forward of each microbatch (the later stages never see
the tokens), and to the recomputed forward in backward. Tolerances: docmask_harness."""
from __future__ import annotations

import pytest

from docmask_harness import assert_layout_parity


@pytest.mark.parity
@pytest.mark.parametrize("arch,extra", [("gpt2", []), ("llama", ["train.recompute=full"])])
def test_packed_documents_at_pp2_equal_each_document_alone(pool2, arch, extra):
    assert_layout_parity(pool2, arch, ["parallel.pp=2", *extra])


@pytest.mark.parity
@pytest.mark.parametrize("arch,extra", [("gpt2", []), ("llama", ["train.recompute=full"])])
def test_packed_documents_under_zbv_equal_each_document_alone(pool2, arch, extra):
    """ZB-V on the V placement: the side input reaches both chunks of a rank, and the I halves' (and
    recompute's) forward anew. (DualPipeV needs 2p = 4 microbatches; the packed batch has 2.)"""
    assert_layout_parity(pool2, arch, ["parallel.pp=2", "parallel.pp_schedule=zbv", "parallel.pp_virtual=2", *extra],
                         model=["model.n_layer=4"])
