"""The ``comm/step`` line counts a whole step's collectives: from the step's start (a pipeline's last stage
receives its first activations before its first forward) to the end of the optimizer step (LORO's exact
steps gather and all-reduce inside it)."""

from __future__ import annotations

import re

import pytest

from tests.end_to_end.test_loro_train import TP2
from tests.end_to_end.whole_step_probe import PROBE
from tests.trainer import PROBE_ENV, train, train_ranks

COMM_LINE = re.compile(r"comm/step: (.*), host syncs \d+ \(rank (\d+)")


def comm_lines(log: str) -> list[str]:
    """Each log step's ``comm/step`` counts, in order."""
    return [m.group(1) for m in COMM_LINE.finditer(log)]


@pytest.mark.slow
def test_loros_exact_step_collectives_are_in_the_comm_line(tmp_path):
    # exact steps at 2 and 4 (loro_freq 2), plain ones at 1 and 3; tp 2, no data parallelism: no collective
    # after the optimizer step (the loss is one rank's), so the probe's whole step is the line's step
    loro = ("--boost.linear", "svd", "--optimizer.name", "LORO", "--optimizer.loro_freq", "2",
            "--optimizer.loro_refresh_freq", "2", "--checkpoint.no-enable", "--validation.no-enable")  # fmt: skip
    log = train(tmp_path, *loro, *TP2, ngpu=2, steps=4, env={PROBE_ENV: PROBE})
    whole = re.findall(r"PROBE step (\d+): (.*)", log)
    assert [int(step) for step, _ in whole] == [1, 2, 3, 4], log[-3000:]
    assert comm_lines(log) == [counts for _, counts in whole], log[-3000:]
    plain, exact = comm_lines(log)[0], comm_lines(log)[1]
    assert plain == comm_lines(log)[2] and exact == comm_lines(log)[3] and exact != plain, (plain, exact)


@pytest.mark.slow
def test_a_pipelines_stages_count_each_others_sends_as_receives(tmp_path):
    # pp 2, two micro-batches: stage 0 sends two activations and receives two gradients, stage 1 the reverse;
    # the last stage's first receive comes before its first forward
    pp = ("--parallelism.pipeline_parallel_degree", "2", "--parallelism.data_parallel_shard_degree", "1",
          "--parallelism.pipeline_parallel_microbatch_size", "2", "--checkpoint.no-enable",
          "--validation.no-enable")  # fmt: skip
    codes, logs = train_ranks(tmp_path, *pp, ngpu=2, steps=2, env={"LOG_RANK": "0,1"})
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    # step 1 also exchanges the stages' shapes (one send and receive more each way); step 2 the micro-batches'
    for step in (0, 1):
        p2p = {}
        for rank, log in enumerate(logs):
            lines = comm_lines(log)
            assert len(lines) == 2, log[-3000:]
            p2p[rank] = dict(re.findall(r"(send|recv) (\d+× [\d.]+ \w+)", lines[step]))
        assert p2p[0]["send"] == p2p[1]["recv"] and p2p[1]["send"] == p2p[0]["recv"], (step + 1, p2p)
    assert p2p[0]["send"].startswith("2×"), p2p
