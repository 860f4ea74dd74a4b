#!/usr/bin/env bash
# The cluster tests with what they need (docs/cluster.md, "What was tested, how"): as root, installs Slurm and
# munge when slurmctld is missing (apt), then runs tests/cluster: the private one-node Slurm (sbatch, scancel
# --signal=TERM and requeue, salloc) and the two network namespaces. `make test` installs nothing: there these
# tests skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "cluster_test: needs root (Slurm's daemons, network namespaces)" >&2
    exit 2
fi
if ! command -v slurmctld >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurm-wlm munge
fi
PY=${PY:-.venv/bin/python}
exec timeout 1200 "$PY" -m pytest -q -s -rs tests/cluster "$@"
