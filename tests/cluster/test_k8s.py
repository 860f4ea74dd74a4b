"""`shardlab launch k8s`: the TrainJob, the JobSet and the Indexed Job (with its Service) validated against schema
fixtures (tests/cluster/fixtures: the TrainJob's from Kubeflow Trainer v2.3.0's published CRD, the JobSet's from
JobSet's published v1alpha2 API reference, the Job's and Service's from the Kubernetes API reference). No cluster
ran them (docs/cluster.md)."""
import json
from pathlib import Path

import pytest
import yaml

from shardlab.testing import run_cli

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = ["--config", "configs/tiny.toml", "parallel.strategy=zero3"]


def validate(value, schema, path="$", defs=None) -> list[str]:
    """The OpenAPI v3 subset the schemas use: type, properties (unknown fields are errors: kubectl
    --validate=strict), required, items, enum, minimum/maximum, min/maxItems, maxLength, int-or-string, $ref."""
    if "$ref" in schema:
        return validate(value, defs[schema["$ref"]], path, defs)
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, (int, str)) and not isinstance(value, bool) else [f"{path}: int or string"]
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return []
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    if kind and (not isinstance(value, types[kind]) or (kind in ("integer", "number") and isinstance(value, bool))):
        return [f"{path}: {type(value).__name__}, not {kind}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"] or "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: {value} out of range")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if kind == "array":
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1 << 30):
            errors.append(f"{path}: {len(value)} items")
        for i, v in enumerate(value):
            errors += validate(v, schema.get("items", {}), f"{path}[{i}]", defs)
    if kind == "object":
        errors += [f"{path}.{k}: required" for k in schema.get("required", []) if k not in value]
        props = schema.get("properties")
        for k, v in value.items():
            if props is not None and k in props:
                errors += validate(v, props[k], f"{path}.{k}", defs)
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(v, schema["additionalProperties"], f"{path}.{k}", defs)
            elif props is not None:
                errors.append(f"{path}.{k}: unknown field")
    return errors


def _manifest(tmp_path, *extra) -> list[dict]:
    out = tmp_path / "job.yaml"
    res = run_cli(["launch", "k8s", "--nodes", "2", "--gpus-per-node", "4", "--image", "registry/shardlab:1",
                   "--pvc", "runs", "--iface", "eth0", "--nccl", "IB_HCA=mlx5", "--write", str(out), *extra, *RUN],
                  timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(out.read_text()) if d]


def test_the_trainjob_is_valid_against_the_published_crd(tmp_path):
    (job,) = _manifest(tmp_path)
    schema = json.loads((FIXTURES / "trainjob.v1alpha1.schema.json").read_text())
    assert validate(job, schema) == []
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 4
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 4}}
    cmd = trainer["command"]
    assert cmd[:5] == ["python", "-m", "shardlab", "launch", "node"] and "$(PET_NODE_RANK)" in cmd
    assert "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)" in cmd and cmd[cmd.index("--iface") + 1] == "eth0"
    train = cmd[cmd.index("--") + 1:]
    assert train[:4] == ["--nproc", "4", "--out", "/shared/runs/shardlab-zero3"] and "ckpt.resume=latest" in train
    assert {"name": "NCCL_IB_HCA", "value": "mlx5"} in trainer["env"]
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > 25  # past ckpt.signal_grace_s: an eviction saves
    # the checker itself: what the CRD would refuse
    bad = json.loads(json.dumps(job))
    bad["spec"]["trainer"]["numNodes"] = "2"
    bad["spec"]["trainer"]["nodes"] = 2
    del bad["spec"]["runtimeRef"]
    assert sorted(validate(bad, schema)) == ["$.spec.runtimeRef: required", "$.spec.trainer.nodes: unknown field",
                                             "$.spec.trainer.numNodes: str, not integer"]


def test_the_indexed_job_and_its_headless_service_are_valid(tmp_path):
    service, job = _manifest(tmp_path, "--kind", "indexed-job", "--namespace", "ml")
    schema = json.loads((FIXTURES / "indexed-job.schema.json").read_text())
    defs = schema["definitions"]
    assert validate(service, defs["Service"], defs=defs) == []
    assert validate(job, defs["Job"], defs=defs) == []
    assert service["spec"]["clusterIP"] == "None" and job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == "shardlab-zero3"
    assert service["spec"]["selector"] == job["spec"]["template"]["metadata"]["labels"]
    cmd = pod["containers"][0]["command"]
    assert cmd[cmd.index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"
    assert cmd[cmd.index("--head") + 1] == "shardlab-zero3-0.shardlab-zero3.ml.svc:29400"


def test_the_jobset_is_valid_against_the_published_api(tmp_path):
    (jobset,) = _manifest(tmp_path, "--kind", "jobset", "--namespace", "ml", "--max-restarts", "5")
    schema = json.loads((FIXTURES / "jobset.v1alpha2.schema.json").read_text())
    defs = schema["definitions"]
    assert validate(jobset, defs["JobSet"], defs=defs) == []
    spec = jobset["spec"]
    assert spec["network"] == {"enableDNSHostnames": True} and spec["failurePolicy"] == {"maxRestarts": 5}
    (node,) = spec["replicatedJobs"]
    job = node["template"]["spec"]
    assert node["name"] == "node" and node["replicas"] == 1
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == 2
    assert job["backoffLimit"] == 0  # a failed pod fails its Job, and the JobSet recreates them all
    pod = job["template"]["spec"]
    assert "subdomain" not in pod and pod["terminationGracePeriodSeconds"] > 25
    cmd = pod["containers"][0]["command"]
    assert cmd[cmd.index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"
    # the controller's pod names: JOBSET-REPLICATEDJOB-JOBINDEX-PODINDEX under the subdomain JOBSET
    assert cmd[cmd.index("--head") + 1] == "shardlab-zero3-node-0-0.shardlab-zero3.ml.svc:29400"
    assert "ckpt.resume=latest" in cmd[cmd.index("--") + 1:]  # a recreated set resumes
    assert pod["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    # the checker itself: what the API would refuse
    bad = json.loads(json.dumps(jobset))
    bad["spec"]["failurePolicy"]["restartStrategy"] = "Always"
    bad["spec"]["replicatedJobs"][0]["replica"] = 1
    del bad["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert sorted(validate(bad, defs["JobSet"], defs=defs)) == [
        "$.spec.failurePolicy.restartStrategy: 'Always' not in ['Recreate', 'BlockingRecreate']",
        "$.spec.replicatedJobs[0].replica: unknown field",
        "$.spec.replicatedJobs[0].template.spec.template.spec.containers: required"]


def test_bad_input_is_one_line_and_nothing_written(tmp_path):
    out = tmp_path / "job.yaml"
    res = run_cli(["launch", "k8s", "--nodes", "3", "--nproc", "4", "--image", "i", "--pvc", "runs", "--write",
                   str(out), *RUN], timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "not divisible" in res.stderr and not out.exists()
    res = run_cli(["launch", "k8s", "--nproc", "1", "--image", "i", "--pvc", "runs", "--out", "/elsewhere/x",
                   "--write", str(out), *RUN], timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 2 and "must be under --mount /shared" in res.stderr and not out.exists()
