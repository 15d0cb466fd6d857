"""``bench.compiled_cost``'s recording on this torch: a CPU compile's kernels, their bytes and FLOPs."""

import json

import torch
import torch._inductor.graph as inductor_graph

from bench.compiled_cost import block_cost, recording, roofline_s


def test_a_compiled_gemm_and_its_activation_are_recorded(tmp_path):
    x, w = torch.randn(256, 128), torch.randn(128, 64)
    silu_of_product = torch.compile(lambda x, w: torch.nn.functional.silu(x @ w), fullgraph=True)
    count_bytes = inductor_graph.GraphLowering.count_bytes
    out = tmp_path / "graphs.jsonl"
    with recording(out):
        silu_of_product(x, w)
    assert inductor_graph.GraphLowering.count_bytes is count_bytes  # put back
    [graph] = [json.loads(line) for line in out.read_text().splitlines()]
    assert graph["backward"] is False
    assert graph["kernels"] == 2  # the GEMM (a library call) and the fused SiLU
    assert graph["flops"] == 2 * 256 * 128 * 64
    assert graph["fused_bytes"] == 2 * 256 * 64 * 4  # SiLU reads the product and writes its own, float32
    gemm_bytes = (256 * 128 + 128 * 64 + 256 * 64) * 4
    modeled = roofline_s(gemm_bytes, graph["flops"]) + roofline_s(graph["fused_bytes"], 0)
    assert abs(block_cost([graph, {**graph, "backward": True}])["block_s"] - 2 * modeled) < 1e-15


def test_a_collective_and_its_wait_are_left_to_the_network(tmp_path):
    """A fake process group (one process, no peer): the all-reduce between two pointwise kernels compiles
    into the graph, with its wait, and only the two kernels are charged."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        reduced = torch.compile(
            lambda x: torch.nn.functional.silu(funcol.all_reduce(x + 1, "sum", dist.group.WORLD)),
            fullgraph=True,
        )
        out = tmp_path / "graphs.jsonl"
        with recording(out):
            reduced(torch.randn(256, 64))
    finally:
        dist.destroy_process_group()
    [graph] = [json.loads(line) for line in out.read_text().splitlines()]
    # the add and the SiLU each read and write 256 × 64 float32; the all-reduce's buffer and its wait no bytes
    assert graph["kernels"] == 2 and graph["fused_bytes"] == 2 * 2 * 256 * 64 * 4
