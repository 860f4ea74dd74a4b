"""Fault-tolerant replicas (`parallel.fault_tolerant=true`, docs/fault_tolerance.md): each replica its own job,
meeting the others at a lighthouse's store, a quorum per step (or per outer step) and a group rebuilt for each.

    every_step.py   every step: the gradient averaged over the step's quorum, a joiner healed by a peer
    periodic.py     local SGD / DiLoCo: the outer step over each outer step's quorum
    manager.py      the quorum protocol (lighthouse.py: when the lighthouse is lost; lane.py: its thread)
    resume.py       a whole job resumed at the step every replica has
    store.py        the transport: messages through the lighthouse's TCPStore (membership only)
    quorum.py       the transport: the process groups rebuilt per quorum (gloo, NCCL on CUDA)

Both step kinds are dp views (parallel/dp/view.py) the composition puts in front of the replica's layer
(`shardlab.parallel.sync.wrap` picks them); the trainer reaches them only through the view's lifecycle hooks
(`on_start`, `before_step`, `summary`). Importing the package loads nothing.
"""
