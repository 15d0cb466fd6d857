"""The README's workflow 2 snippet, run as written under torchrun, checked against the dense block."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.trainer import ROOT

CHECK = """
# appended by the test: the sharded block equals the dense block on the gathered input
xs = [torch.empty_like(x_local) for _ in range(mesh.size())]
dist.all_gather(xs, x_local)
torch.manual_seed(0)
dense = nn.Sequential(nn.Linear(1024, 256), nn.SiLU(), nn.Linear(256, 1024))
ref = dense(torch.cat(xs, -1)).chunk(mesh.size(), -1)[dist.get_rank()]
torch.testing.assert_close(y_local, ref, rtol=1e-5, atol=1e-5)
print("workflow 2 matches the dense block on rank", dist.get_rank())
# the comment's alternative, on the same block: the same sharded function
torch.manual_seed(0)
named = nn.Sequential(nn.Linear(1024, 256), nn.SiLU(), nn.Linear(256, 1024))
parallelize_module(named, mesh, {alternative})
torch.testing.assert_close(named(x_local), y_local, rtol=0, atol=0)
print("workflow 2's alternative matches on rank", dist.get_rank())
"""


@pytest.mark.slow
def test_readme_workflow_2_runs_and_matches_the_dense_block(tmp_path):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Workflow 2") :]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "example.py"
    # the snippet's comment offers a second way to name the projections: run it too
    alternative = re.search(r"# or [^B]*(BoostParallelStyle\(.+\))$", snippet, re.M).group(1)
    script.write_text(snippet + CHECK.format(alternative=alternative))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("workflow 2 matches the dense block") == 2
    assert proc.stdout.count("workflow 2's alternative matches") == 2
