"""``bench.cpu_schemes`` records the command it ran: rerunning the header's command reruns the table (it
dropped ``--warmup`` and ``--png``, so a table measured after one warm-up step read as after two)."""

from __future__ import annotations

import os
import re
import shlex

import pytest

from bench import cpu_schemes


def _rerun(command: str):
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "bench.cpu_schemes"]
    return cpu_schemes.parser().parse_args(words[3:])


@pytest.mark.slow  # two gloo rank processes
def test_a_runs_header_names_every_option_it_changed(capsys):
    argv = ["--tp", "2", "--flavor", "debug", "--seq", "32", "--batch", "2", "--reps", "1", "--warmup", "0"]
    cpu_schemes.main(argv)  # two gloo ranks, one step of each scheme
    out = capsys.readouterr().out
    command = re.search(r"command: (.*)$", out, re.M).group(1)
    assert "--warmup 0" in command
    assert _rerun(command) == cpu_schemes.parser().parse_args(argv)
    assert re.search(r"^\| 2 \| btp \| \d+\.\d{3} \| \d+ \| [\d.]+ \| 1\.00× \|$", out, re.M)


def test_the_header_keeps_the_drawing_and_the_compiled_runs():
    p = cpu_schemes.parser()
    argv = ["--flavor", "130M", "--batch", "8", "--reps", "3", "--warmup", "1", "--png", "x.png", "--compile"]
    a = p.parse_args(argv)
    command = cpu_schemes.header(p, a)[1].split("command: ", 1)[1]
    assert command == "python -m bench.cpu_schemes " + " ".join(argv)
    assert _rerun(command) == a


def test_the_header_gives_the_threads_each_rank_runs_with(monkeypatch):
    # it printed the parent's torch.get_num_threads() (every core), where each rank runs cores // tp
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    p = cpu_schemes.parser()
    machine = cpu_schemes.header(p, p.parse_args(["--tp", "2", "4", "32"]))[1]
    assert "16 cores, threads a rank 8 at TP=2, 4 at TP=4, 1 at TP=32, torch " in machine


@pytest.mark.parametrize(
    ("op", "category"),
    [
        ("c10d::allgather_into_tensor_coalesced_", "collectives"),  # btp's final gather: it was "other"
        ("c10d::allreduce_", "collectives"),
        ("c10d::_allgather_base_", "collectives"),
        ("c10d::barrier", "collectives"),
        ("c10d::reduce_scatter_tensor_coalesced_", "collectives"),
        ("_c10d_functional::wait_tensor", "collectives"),
        ("aten::mm", "GEMM"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::add_", "other"),
        ("aten::copy_", "other"),
    ],
)
def test_every_communication_op_is_split_as_collectives(op, category):
    assert cpu_schemes.category(op) == category


@pytest.mark.parametrize("flag", ["--reps", "--seq", "--batch", "--tp"])
def test_values_that_describe_no_step_are_refused(capsys, flag):
    # --reps 0 ran every scheme's warm-up and ended in statistics.StatisticsError
    with pytest.raises(SystemExit) as exit_:
        cpu_schemes.main([flag, "0"])
    assert exit_.value.code == 2
    assert f"argument {flag}: 0 is not a positive integer" in capsys.readouterr().err
