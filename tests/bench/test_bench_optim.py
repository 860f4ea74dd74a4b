"""The optim suite's arithmetic (bench/optim.py): tokens to reach a loss and the token-efficiency ratio."""
from shardlab.bench.cli import SUITES
from shardlab.bench.optim import efficiency, tokens_to_reach


def _run(losses):
    return {"tokens": [100 * (i + 1) for i in range(len(losses))], "smoothed": losses, "final_smoothed": losses[-1]}


def test_token_efficiency_interpolates_and_bounds():
    adamw, muon = _run([4.0, 3.0, 2.0, 1.0]), _run([3.5, 2.5])
    assert tokens_to_reach(adamw, 2.5) == 250
    assert efficiency(adamw, muon) == (250 / 200, True)
    assert efficiency(_run([4.0, 3.0]), muon) == (1.0, False)  # never reached: a lower bound
    assert SUITES["optim"][0] == "shardlab.bench.optim"
