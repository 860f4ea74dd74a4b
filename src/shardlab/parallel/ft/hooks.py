"""The lifecycle hooks both fault-tolerant views share (the no-ops: parallel/dp/base.py); each view has its own
`on_start` (found the job or join it) and the every-step view its `before_step` (the step's quorum). The trainer
calls them on whatever layer it has and never asks whether the run is fault tolerant."""
from __future__ import annotations

# summary.json's top-level copy of the `ft` record's headline keys (docs/fault_tolerance.md)
HEADLINE = ("restarts", "heals", "quorums", "param_checksum")


class ReplicaHooks:
    def data_slice(self) -> tuple[int, int]:
        # replicas are separate jobs: replica i takes slice i of an R-times larger global batch
        return int(self.pcfg.replicas), int(self.pcfg.replica_id)

    def summary(self) -> dict:
        ft = self.ft_summary()  # restarts, heals, quorums, param_checksum and the view's own counts
        return {"ft": ft, **{k: ft[k] for k in HEADLINE}}
