"""What every frozen set of published rows owes, whatever its source (plan/published_gpu_*.py): its cases appear in
no earlier set (a row is held against the planner once), and every row plans to a finite throughput and memory.
Each set's own file checks that its rows are the recipe its module reads."""
import importlib
import math

import pytest

from shardlab.plan import published_gpu, published_gpu_heldout as heldout, published_gpu_unseen as unseen

EARLIER = {r["case"] for s in (published_gpu.GIVEN, published_gpu.HELD_OUT, published_gpu.EXAMINED,
                               published_gpu.HELD_OUT_2, heldout.HELD_OUT, unseen.UNSEEN) for r in s}
SETS = {"seventeenth": "SEVENTEENTH", "eighteenth": "EIGHTEENTH", "nineteenth": "NINETEENTH",
        "twentieth": "TWENTIETH"}


def _rows(name: str):
    mod = importlib.import_module(f"shardlab.plan.published_gpu_{name}")
    return mod, getattr(mod, SETS[name])


@pytest.mark.parametrize("name", sorted(SETS))
def test_cases_are_new_and_unique(name):
    _, rows = _rows(name)
    cases = [r["case"] for r in rows]
    assert rows and len(set(cases)) == len(cases)
    assert not EARLIER & set(cases)


@pytest.mark.parametrize("name", sorted(SETS))
def test_every_row_plans(name):
    mod, rows = _rows(name)
    for r in mod.evaluate_rows(rows):
        assert math.isfinite(r["planner"]) and r["planner"] > 0, r["case"]
        assert math.isfinite(r["planner_mem_gib"]) and r["planner_mem_gib"] > 0, r["case"]
