"""The console summary writes numbers as the step lines do (`12,565 tok/s`, not `1.257e+04`)."""
import io

from shardlab.train.metrics import print_summary


def test_the_summary_reads_like_the_step_lines():
    summary = {"strategy": "ddp", "world_size": 2, "params": 120576, "steps": 20, "tokens_per_s": 12565.4,
               "step_time_s": 0.2041, "mfu": 0.11, "peak_flops_per_rank": 7.17e10, "final_train_loss": 4.49581,
               "final_val_loss": 4.41102, "peak_mem_bytes": 328794112, "ranks_consistent": True}
    out = io.StringIO()
    print_summary(summary, file=out)
    lines = {ln.split()[0]: ln.split(None, 1)[1] for ln in out.getvalue().splitlines()[2:]}
    assert lines["tokens_per_s"] == "12,565 tok/s"  # the step line's `{:,.0f} tok/s`
    assert lines["params"] == "120,576" and lines["steps"] == "20"
    assert lines["step_time_s"] == "0.204 s"
    assert lines["final_train_loss"] == "4.4958" and lines["final_val_loss"] == "4.4110"  # the step line's .4f
    assert lines["peak_mem_bytes"] == "328,794,112 (313.6 MiB)"
    assert lines["mfu"] == "11.00% (peak 71.7 GFLOP/s per rank)"
    assert lines["ranks_consistent"] == "True" and lines["layout"] == "None"  # absent keys say so
    assert "e+" not in out.getvalue()  # no exponent anywhere a person reads
