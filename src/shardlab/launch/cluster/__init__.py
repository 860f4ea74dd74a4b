"""Beyond one machine: scheduler recipes and one node's start (docs/cluster.md).

    shardlab launch slurm ...   an sbatch script: one torchrun agent per node, c10d rendezvous on the head node,
                                SIGTERM before the time limit (the run saves, exits 143) and requeue (it resumes)
    shardlab launch k8s ...     a Kubeflow Trainer v2 TrainJob, or a JobSet / an Indexed Job with a headless Service
    shardlab launch node ...    one node of a multi-node run: the socket interface checked and exported
                                (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), the head node's rendezvous port
                                reached within a timeout, then `shardlab train --nnodes ...` in this process

The recipes only write text; the node command is what every recipe runs on each node.
"""
