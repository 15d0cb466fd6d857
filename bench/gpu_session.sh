#!/usr/bin/env bash
# A lent GPU's work in two prepared calls of the device tool (issue 41): the report first, then the whole
# suite on the GPU machine, checked to leave the tree as it was. Run from the checkout's root on the GPU
# machine, with the wheels of what its image lacks in .whl (git-ignored: pass carry [".whl"]), fetched
# here first (a GPU image with torch 2.11, triton and CUDA but without torchtitan, torchdata, tyro or
# datasets, Python 3.12, no network; bench/results/gpu.md, "How these reports were run"):
#
#   PYTHON=.venv/bin/python bash bench/gpu_session.sh wheels                     # here, before the lease
#       -> .whl/ (torchtitan and what it needs beyond the image, no dependencies; PYVER=3.12)
#   bash bench/gpu_session.sh report --checkout SHA --budget-s 470 [--rows ...]   # ~8 min
#       -> $OUT/gpu.md (bench.gpu_report's), $OUT/report.log, $OUT/logs.tgz (each row's log, NVML samples, kernel JSON)
#   bash bench/gpu_session.sh suite [pytest options]                             # 4.5 min on 16 cores
#       -> $OUT/suite.log (ends with the tree check), $OUT/tree.txt (what changed, where something did)
#   bash bench/gpu_session.sh gate [bench.lax_gate options]                      # not yet run on a GPU
#       -> $OUT/lax_gate.md: LaX's crossing alone against CoLA's σ, each gate form, at the 7B@16 rank's
#          widths (BTP's whole latent and SP's tp-th) and the 1B trainer's (issue 40)
#
# The wheels go to /tmp/site with no dependencies (no `pip install -e .`): the image's torch, triton and
# CUDA libraries stay as they are. Each call installs them (a few seconds): a machine idle for 30 s is
# given back and the next call starts a bare one. Limits: a call runs at most 10 minutes, a session has
# 15 minutes of device time, so the report's budget and the suite's SUITE_S (300 s) fit one start each
# (2026-11-28, one H200: the report's call 425 s, the suite's 282 s, its pytest 271 s; 752 s of the 900).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_session}
python=${PYTHON:-python3}
part=${1:-}
shift || true
if [[ "$part" == wheels ]]; then
  # the versions this checkout is tested with (pyproject.toml's pins and what they resolved to here)
  exec "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "${PYVER:-3.12}" \
    --platform manylinux_2_28_x86_64 --platform any -d .whl torchtitan==0.2.2 torchdata==0.11.0 tyro==1.0.17 \
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 docstring_parser==0.18.0 typeguard==4.6.1
fi
if [[ "$part" != report && "$part" != suite && "$part" != gate ]]; then
  echo "usage: bash bench/gpu_session.sh wheels | report [bench.gpu_report options] | suite [pytest options]" \
    "| gate [bench.lax_gate options]" >&2
  exit 2
fi
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/ind}

if [[ "$part" == report ]]; then
  # ended by the command's own budget; the timeout only guards a row that outlives it
  timeout 580 "$python" -m bench.gpu_report --out "$out/gpu.md" --keep-logs /tmp/gpu_logs "$@" 2>&1 |
    tee "$out/report.log"
  rc=${PIPESTATUS[0]}
  [[ -d /tmp/gpu_logs ]] && tar czf "$out/logs.tgz" -C /tmp gpu_logs
  exit "$rc"
fi

if [[ "$part" == gate ]]; then
  { "$python" -m bench.lax_gate --flavor 7B --tokens 16384 4096 "$@" &&
    "$python" -m bench.lax_gate --flavor 1B --tokens 16384 "$@"; } 2>&1 | tee "$out/lax_gate.md"
  exit "${PIPESTATUS[0]}"
fi

# Every file of the tree but caches, the carried wheels and build/, with its hash: the suite must leave
# each as it was (bench/results/gpu.md above all: a test that ran the report would rewrite it).
listing() {
  find . \( -path ./.whl -o -path ./build -o -path ./.git -o -name __pycache__ -o -name .pytest_cache \) -prune \
    -o -type f -print0 | sort -z | xargs -0 sha1sum
}
listing >/tmp/tree_before.txt
{
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  "$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$out/suite.log"
# -p no:cacheprovider: no .pytest_cache in the tree; the suite hides the GPU from itself (tests/conftest.py)
timeout "${SUITE_S:-300}" "$python" -m pytest -q -p no:cacheprovider --durations=15 -rfE "$@" 2>&1 |
  tee -a "$out/suite.log"
rc=${PIPESTATUS[0]}
listing >/tmp/tree_after.txt
if diff /tmp/tree_before.txt /tmp/tree_after.txt >"$out/tree.txt"; then
  echo "tree check: every file as it was before the suite" | tee -a "$out/suite.log"
  rm -f "$out/tree.txt"
else
  echo "tree check: the suite changed the tree ($out/tree.txt)" | tee -a "$out/suite.log"
  [[ $rc -eq 0 ]] && rc=1
fi
exit "$rc"
