"""`shardlab bench faults` (bench/faults.py) without its drills: the matrix and how missed steps become the
reference run's planned absence. The drills themselves run the code tests/parallel/dp/test_ft_every_step.py
and tests/launch/test_lighthouse.py check."""
from shardlab.bench import faults
from shardlab.bench.cli import SUITES


def test_missed_steps_become_spans_for_the_reference():
    assert faults._spans([]) == []
    assert faults._spans([3]) == [(3, 3)]
    assert faults._spans([3, 4, 5, 8]) == [(3, 5), (8, 8)]


def test_the_quick_matrix_is_a_subset_and_the_suite_is_listed():
    quick, full = faults.matrix(True), faults.matrix(False)
    assert set(quick) <= set(full) and len(quick) < len(full)
    assert {kind for _, kind in full} == {"kill", "kill2", "heal", "save", "stop", "lighthouse"}
    assert ("kill-in-heal", "heal") in quick  # a kill inside a widened heal: cheap enough for --quick
    assert SUITES["faults"][0] == "shardlab.bench.faults"
