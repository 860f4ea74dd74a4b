"""Tensor and sequence parallelism with packed documents (data.doc_mask): the per-token positions stay
whole (sequence parallelism splits the activations, not the ids: its position lookup takes its slice of
each row, the attention sees the whole sequence and its mask). Tolerances: docmask_harness."""
from __future__ import annotations

import pytest

from docmask_harness import assert_layout_parity


@pytest.mark.parity
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_packed_documents_at_tp2_sp_equal_each_document_alone(pool2, arch):
    assert_layout_parity(pool2, arch, ["parallel.tp=2", "parallel.sp=true"])
