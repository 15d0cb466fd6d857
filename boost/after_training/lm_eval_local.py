"""lm-evaluation-harness on an exported model and a local text file (no download).

A rolling log-likelihood task (lm-eval's ``wikitext`` recipe) over the documents of a ``.txt``
(one document per file) or ``.jsonl`` (field ``text``) file: word and byte perplexity and bits per
byte, computed by lm-eval through transformers on a folder ``boost.after_training.interop export`` wrote. lm-eval
is an optional tool, not a BOOST dependency: ``pip install lm-eval accelerate``.

lm-eval scores each document on its own, ``[BOS] text`` in windows of the model's
``max_position_embeddings`` (no EOS, no packing), so its bits per byte equal ``boost.after_training.evaluate.score``
on the same per-document windows, not the packed ``boost.after_training.evaluate`` CLI number.

CLI (or lm-eval's own ``lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True,add_bos_token=False``
with a task YAML holding :func:`local_text_task`'s fields)::

    python -m boost.after_training.lm_eval_local --model hf_debug --data notes.txt [--batch-size 1] [--limit 100]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def local_text_task(data: str | Path, name: str = "boost_local_text") -> dict:
    """lm-eval task config: rolling log-likelihood over the documents of ``data``."""
    data = Path(data).expanduser()
    if not data.is_file() or data.suffix not in (".txt", ".jsonl"):
        raise ValueError(f"--data {data} must be an existing .txt or .jsonl file")
    if data.suffix == ".jsonl":
        dataset = {"dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}}}
    else:  # the whole file is one document, as BOOST's "local" dataset reads a .txt
        dataset = {
            "dataset_path": "text",
            "dataset_kwargs": {"data_files": {"test": str(data)}, "sample_by": "document"},
        }
    return {
        "task": name,
        **dataset,
        "test_split": "test",
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [
            {"metric": m, "aggregation": agg, "higher_is_better": False}
            for m, agg in (
                ("word_perplexity", "weighted_perplexity"),
                ("byte_perplexity", "weighted_perplexity"),
                ("bits_per_byte", "bits_per_byte"),
            )
        ],  # fmt: skip
        "metadata": {"version": 1.0},
    }


def evaluate_local_text(
    model_dir: str | Path, data: str | Path, batch_size: int = 1, limit: int | None = None
) -> dict:
    """lm-eval's results for ``model_dir`` (a transformers folder) on ``data``: ``{metric: value}``."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # the task reads a local file; nothing to fetch
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
    except ImportError as e:
        raise ImportError(f"lm-eval is not installed ({e}); pip install lm-eval accelerate") from None
    if not (Path(model_dir) / "config.json").is_file():
        raise ValueError(
            f"--model {model_dir} holds no config.json; export one with python -m boost.after_training.interop export"
        )
    # add_bos_token=False: lm-eval already puts BOS before each window (its prefix token); left to the
    # tokenizer (whose post-processor adds BOS), every document would also be scored on a second BOS.
    lm = HFLM(
        pretrained=str(model_dir), trust_remote_code=True, dtype="float32", batch_size=batch_size, device="cpu",
        add_bos_token=False,
    )  # fmt: skip
    task = local_text_task(data)
    results = lm_eval.simple_evaluate(model=lm, tasks=[task], limit=limit)["results"][task["task"]]
    return {k.split(",")[0]: v for k, v in results.items() if k.endswith(",none") and "stderr" not in k}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m boost.after_training.lm_eval_local", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--model", required=True, help="folder written by python -m boost.after_training.interop export"
    )
    parser.add_argument("--data", required=True, help=".txt (one document) or .jsonl (field text)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="score only the first N documents")
    ns = parser.parse_args(argv)
    try:
        results = evaluate_local_text(ns.model, ns.data, ns.batch_size, ns.limit)
    except (ImportError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for metric, value in results.items():
        print(f"{metric:16s} {value:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
