"""The ninth set's rows as the source's tables give them (plan/published_gpu_ninth.py)."""
from collections import Counter

from shardlab.plan.layout import Layout
from shardlab.plan.published_gpu_heldout import row_model
from shardlab.plan.published_gpu_ninth import NINTH


def test_the_rows_are_the_tables_dense_llama_fp8_rows_on_gb200_and_gb300():
    """Eleven layouts (the latest container's figure of each), FP8 current scaling, none seen before freezing; the
    FSDP rows are ZeRO-3, the GB200 405B one in two optimizer instances, each with its recipe's activation offload;
    every layout is one the planner takes."""
    assert len(NINTH) == 11 and len({r["case"] for r in NINTH}) == 11
    assert Counter(r["cluster"] for r in NINTH) == {"GB200": 5, "GB300": 6}
    assert {r["fp8"] for r in NINTH} == {"tensorwise"} and not any(r["seen"] for r in NINTH)
    assert Counter(r["layout"]["strategy"] for r in NINTH) == {"zero3": 6, "zero1": 5}
    r = next(r for r in NINTH if r["case"] == "MB Llama3.1-405B GB200x128 FP8-CS")
    assert (r["layout"]["dp"], r["layout"]["tp"], r["layout"]["dp_shard"], r["tokens_per_gpu"]) == (64, 2, 32, 706)
    r = next(r for r in NINTH if r["case"] == "MB Llama3.1-405B GB300x256 FP8 tp2cp2")
    lay = r["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["cp"], lay["v"], lay["pp_split"]) == (8, 2, 8, 2, 4, "ends-as-blocks")
    assert lay["overlap_p2p_comm"] and lay["tp_comm_overlap"] and r["shape"]["vocab"] == 128256  # 128 x 2 divides it
    # after the first evaluation: the FSDP recipes' cpu_offloading_num_layers
    assert {r["case"].split(" FP8")[0]: r["layout"]["offload_activations"] for r in NINTH
            if r["layout"].get("offload_activations")} == {
        "MB Llama3-70B GB200x64": 40, "MB Llama3.1-405B GB200x128": 92, "MB Llama3-70B GB300x64": 20,
        "MB Llama3.1-405B GB300x128": 10}
    for row in NINTH:
        Layout(**row["layout"], comm_dtype=row["comm_dtype"]).check(row_model(row))  # no plan: a layout check
