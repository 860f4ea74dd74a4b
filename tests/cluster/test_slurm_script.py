"""The sbatch script as text (no Slurm needed): valid bash, the directives an engineer expects, bad input refused
in one line with nothing written."""
import subprocess

from shardlab.testing import run_cli

RUN = ["model.preset=tiny", "train.seq_len=32", "train.micro_batch=2", "parallel.strategy=ddp"]


def test_the_script_says_what_a_slurm_engineer_expects(tmp_path):
    script = tmp_path / "job.sbatch"
    res = run_cli(["launch", "slurm", "--nodes", "4", "--gpus-per-node", "8", "--cpus-per-node", "96", "--time",
                   "12:00:00", "--partition", "gpu", "--account", "proj", "--iface", "ib0", "--nccl", "IB_HCA=mlx5",
                   "--sbatch=--constraint=h100", "--out", str(tmp_path / "run"), "--write", str(script), *RUN],
                  timeout=60)
    assert res.returncode == 0, res.stderr
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=96", "#SBATCH --time=12:00:00", "#SBATCH --partition=gpu",
                 "#SBATCH --account=proj", "#SBATCH --signal=TERM@120", "#SBATCH --requeue", "#SBATCH --exclusive",
                 "#SBATCH --constraint=h100", "export NCCL_IB_HCA=mlx5",
                 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                 "port=$(( 15000 + SLURM_JOB_ID % 15000 ))", 'scontrol requeue "$SLURM_JOB_ID"'):
        assert line in text, line
    srun = text[text.index("\nsrun "):text.index("rc=$?")]
    assert '--ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-96}"' in srun
    assert '--head "$head:$port"' in srun and "--iface ib0" in srun and "--nproc 8" in srun
    assert f"--out \"$RUN\"" in srun and "ckpt.resume=latest" in srun and f"RUN={tmp_path / 'run'}" in text
    assert "#SBATCH" not in text[text.index("set -uo"):]  # sbatch reads directives only before the first command


def test_bad_input_is_one_line_and_nothing_written(tmp_path):
    script = tmp_path / "job.sbatch"
    for args, said in ((["--nodes", "3", "--nproc", "3", "train.global_batch=8"], "not divisible"),
                       (["--nproc", "2", "--signal-lead", "20"], "--signal-lead 20: must exceed ckpt.signal_grace_s"),
                       (["--nproc", "2", "--nccl", "IB_HCA"], "must be KEY=VALUE"),
                       (["--nodes", "2"], "--nproc N (ranks per node) or --gpus-per-node G is needed")):
        res = run_cli(["launch", "slurm", "--write", str(script), *args, *RUN], timeout=60)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and said in res.stderr, res.stderr
        assert not script.exists()
