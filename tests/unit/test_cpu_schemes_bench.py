"""``bench.cpu_schemes`` records the command it ran: rerunning the header's command reruns the table (it
dropped ``--warmup`` and ``--png``, so a table measured after one warm-up step read as after two)."""

from __future__ import annotations

import re
import shlex

from bench import cpu_schemes


def _rerun(command: str):
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "bench.cpu_schemes"]
    return cpu_schemes.parser().parse_args(words[3:])


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
