"""Muon (Jordan et al. 2024) with AdamW for what is not a hidden matrix (the Moonlight split, Liu et al. 2025):
the registry's `muon` row (docs/optim.md).

    newton_schulz.py  the orthogonalisation (quintic Newton-Schulz) and the update-RMS matching scale
    optimizer.py      the hybrid optimizer (one torch optimizer: Muon groups and AdamW groups) and its factory
    exchange.py       the sharded step: every matrix gathered whole on one rank of its group, orthogonalised
                      there and scattered back (round-robin by size)
    cost.py           torch-free formulas: which parameters Muon steps, the exchange's bytes per rank, the
                      Newton-Schulz FLOPs, and the planner's cost hook (the registry row's `cost`)
"""
