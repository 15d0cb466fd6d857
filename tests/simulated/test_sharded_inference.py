"""Sharded inference on a process count the model does not split over: three ranks, simulated in this process
(``tests/simulated_ranks.py``), refused in the after-training tools' words before anything is sharded."""

from __future__ import annotations

import pytest

from boost.after_training.trained_run import shard_for_inference
from boost.training.data.run_tokenizer import RunError
from boost.training.model import ModelArgs, Transformer
from tests.simulated_ranks import simulated_ranks


@pytest.mark.slow
def test_a_process_count_that_does_not_divide_the_heads_is_refused_as_torchruns():
    model = Transformer(ModelArgs.from_flavor("debug", vocab_size=96, n_layers=1))  # 8 heads, 4 kv heads
    with simulated_ranks(3), pytest.raises(RunError) as refused:
        shard_for_inference(model, {"boost": {"norm": "online"}})
    message = str(refused.value)
    assert message.startswith("3 processes shard the model 3 ways, and it does not split so (")
    assert message.endswith(
        "run torchrun --nproc_per_node with a count that divides its heads, or one process"
    )
