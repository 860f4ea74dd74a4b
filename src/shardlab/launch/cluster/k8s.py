"""`shardlab launch k8s`: the manifests of a run on Kubernetes (docs/cluster.md, "Kubernetes").

    --kind trainjob     Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) on the torch-distributed
                        runtime, which injects PET_NNODES / PET_NODE_RANK / PET_MASTER_ADDR / PET_MASTER_PORT
    --kind jobset       a JobSet (jobset.x-k8s.io/v1alpha2): one Indexed Job of N pods, the headless Service
                        made by the JobSet controller; a failed node recreates every pod (failurePolicy,
                        --max-restarts times), and each resumes from the latest checkpoint
    --kind indexed-job  no operator: a headless Service and an Indexed Job (batch/v1); node rank = the pod's
                        completion index, the head = pod 0's stable name under the Service

Each pod runs `shardlab launch node` (interface and head checks, then shardlab's launcher and torchrun agent)
with the node's arguments from the environment ($(VAR): Kubernetes expands it, no shell). The run directory is
on a shared volume (a ReadWriteMany PersistentVolumeClaim) every pod mounts; the pod's grace after SIGTERM
(terminationGracePeriodSeconds) is ckpt.signal_grace_s plus a margin, so an eviction saves and exits 143.
"""
from __future__ import annotations

import json

from shardlab.errors import ConfigError
from shardlab.launch.cluster.job import Run

KINDS = ("trainjob", "jobset", "indexed-job")
PORT = 29400  # the rendezvous port of the Indexed Job's and JobSet's head (the TrainJob's: from the runtime)
REPLICATED_JOB = "node"  # the JobSet's one replicated job: pod names NAME-node-0-INDEX


def add_options(p) -> None:
    p.add_argument("--kind", choices=KINDS, default="trainjob")
    p.add_argument("--image", required=True, help="container image with shardlab installed")
    p.add_argument("--namespace", default="default")
    p.add_argument("--runtime", default="torch-distributed", help="the TrainJob's ClusterTrainingRuntime")
    p.add_argument("--pvc", required=True, help="ReadWriteMany PersistentVolumeClaim holding the run directories")
    p.add_argument("--mount", default="/shared", help="where the claim is mounted in the pods")
    p.add_argument("--max-restarts", type=int, default=3, help="jobset: times the JobSet recreates all its pods "
                   "after a node fails (failurePolicy.maxRestarts); each attempt resumes from the latest checkpoint")


def _node_command(run: Run, nnodes: str, rank: str, head: str) -> list[str]:
    cmd = ["python", "-m", "shardlab", "launch", "node", "--nnodes", nnodes, "--node-rank", rank, "--head", head,
           "--timeout", str(run.timeout_s)]
    if run.iface:
        cmd += ["--iface", run.iface]
    return cmd + ["--", *run.train_args()]


def _env(run: Run) -> list[dict]:
    return [{"name": k, "value": v} for k, v in run.env.items()]


def _resources(gpus: int) -> dict:
    return {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}


def _grace(cfg) -> int:
    return int(cfg.ckpt.signal_grace_s) + 15  # the ranks' grace, then the launcher's verdict and the exit


def trainjob(run: Run, name: str, args, cfg) -> list[dict]:
    trainer = {"image": args.image, "numNodes": run.nodes, "numProcPerNode": run.nproc,
               "command": _node_command(run, "$(PET_NNODES)", "$(PET_NODE_RANK)",
                                        "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)")}
    if run.env:
        trainer["env"] = _env(run)
    if args.gpus_per_node:
        trainer["resourcesPerNode"] = _resources(args.gpus_per_node)
    pod = {"terminationGracePeriodSeconds": _grace(cfg),
           "containers": [{"name": "node", "volumeMounts": [{"name": "runs", "mountPath": args.mount}]}],
           "volumes": [{"name": "runs", "persistentVolumeClaim": {"claimName": args.pvc}}]}
    patch = {"manager": "shardlab", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}}}}
    return [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
             "metadata": {"name": name, "namespace": args.namespace},
             "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                     "name": args.runtime},
                      "trainer": trainer, "runtimePatches": [patch]}}]


def _indexed_pods(run: Run, name: str, args, cfg, head: str, labels: dict | None = None) -> dict:
    """The spec of an Indexed Job of `run.nodes` pods, one node each: node rank = the completion index."""
    container = {"name": "node", "image": args.image,
                 "command": _node_command(run, str(run.nodes), "$(JOB_COMPLETION_INDEX)", head),
                 "ports": [{"containerPort": PORT, "name": "rendezvous"}],
                 "volumeMounts": [{"name": "runs", "mountPath": args.mount}]}
    if run.env:
        container["env"] = _env(run)
    if args.gpus_per_node:
        container["resources"] = _resources(args.gpus_per_node)
    # a Service of our own selects the pods (their subdomain); a JobSet's controller sets the subdomain itself
    pod = {"subdomain": name} if labels else {}
    pod.update(restartPolicy="Never", terminationGracePeriodSeconds=_grace(cfg), containers=[container],
               volumes=[{"name": "runs", "persistentVolumeClaim": {"claimName": args.pvc}}])
    template = {"metadata": {"labels": labels}, "spec": pod} if labels else {"spec": pod}
    return {"completionMode": "Indexed", "completions": run.nodes, "parallelism": run.nodes,
            # a failed pod fails the job: the nodes of one rendezvous start and end together
            "backoffLimit": 0, "template": template}


def indexed_job(run: Run, name: str, args, cfg) -> list[dict]:
    labels = {"app.kubernetes.io/name": "shardlab", "shardlab/job": name}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": args.namespace},
               # headless: each pod gets a DNS name NAME-INDEX.NAME, and pod 0's exists before it is ready
               "spec": {"clusterIP": "None", "selector": labels, "publishNotReadyAddresses": True,
                        "ports": [{"name": "rendezvous", "port": PORT}]}}
    head = f"{name}-0.{name}.{args.namespace}.svc:{PORT}"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": args.namespace},
           "spec": _indexed_pods(run, name, args, cfg, head, labels)}
    return [service, job]


def jobset(run: Run, name: str, args, cfg) -> list[dict]:
    """One replicated job (replicas 1) of run.nodes indexed pods. enableDNSHostnames: the controller makes the
    headless Service NAME (publishNotReadyAddresses defaults to true) and names the pods NAME-node-0-INDEX, so
    the head is pod 0's name. A node that fails fails its Job; failurePolicy then recreates every Job of the
    set, up to --max-restarts times, and every node's `ckpt.resume=latest` resumes from the latest checkpoint."""
    if args.max_restarts < 0:
        raise ConfigError(f"--max-restarts {args.max_restarts}: must be at least 0")
    head = f"{name}-{REPLICATED_JOB}-0-0.{name}.{args.namespace}.svc:{PORT}"
    spec = {"network": {"enableDNSHostnames": True},
            "failurePolicy": {"maxRestarts": args.max_restarts},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [REPLICATED_JOB]},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1,
                                "template": {"spec": _indexed_pods(run, name, args, cfg, head)}}]}
    return [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
             "metadata": {"name": name, "namespace": args.namespace}, "spec": spec}]


def manifest(kind: str, run: Run, name: str, args, cfg) -> str:
    if not run.out.startswith(args.mount.rstrip("/") + "/"):
        raise ConfigError(f"--out {run.out}: must be under --mount {args.mount} (the shared volume every pod mounts)")
    docs = {"trainjob": trainjob, "jobset": jobset, "indexed-job": indexed_job}[kind](run, name, args, cfg)
    header = f"# shardlab launch k8s --kind {kind}: {run.nodes} pod(s) x {run.nproc} rank(s), run {run.out}\n"
    return header + "".join("---\n" + to_yaml(d) for d in docs)


def to_yaml(value, indent: int = 0) -> str:
    """Block YAML of dicts, lists and scalars; strings double-quoted (JSON's escapes are YAML's)."""
    pad = " " * indent
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{k}:\n{to_yaml(v, indent + 2)}")
            else:
                out.append(f"{pad}{k}: {_scalar(v)}\n")
        return "".join(out)
    out = []
    for v in value:
        if isinstance(v, (dict, list)) and v:
            body = to_yaml(v, indent + 2)
            out.append(f"{pad}- {body[indent + 2:]}")
        else:
            out.append(f"{pad}- {_scalar(v)}\n")
    return "".join(out)


def _scalar(v) -> str:
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return json.dumps(v)
