"""Tiny "finished training runs" for the after-training tools: a TOML and a real DCP checkpoint.

The model is the debug flavor, untrained (seeded), saved with ``torch.distributed.checkpoint`` the
way torchtitan saves the model part (flat parameter names), so loading it exercises the same path
as a checkpoint of ``./run_train.sh`` without paying for training steps.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from boost.training.data.run_tokenizer import load_tokenizer, run_tokenizer_dir
from boost.training.model import ModelArgs, Transformer

SEQ_LEN = 64


def offline_tokenizer_dir() -> Path:
    """The offline BPE a default run trains with (trained once and cached under the BOOST cache)."""
    return run_tokenizer_dir({})


def make_run(folder: Path, linear: str = "cola", step: int = 3) -> Path:
    """Write ``folder/run.toml`` and ``folder/checkpoint/step-<step>``; return the TOML's path."""
    vocab = load_tokenizer(offline_tokenizer_dir()).vocab_size
    torch.manual_seed(0)
    model = Transformer(ModelArgs.from_flavor("debug", linear=linear, vocab_size=vocab, max_seq_len=SEQ_LEN))
    with warnings.catch_warnings():  # "no process group, assuming a single process": as intended
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(model.state_dict(), checkpoint_id=str(folder / "checkpoint" / f"step-{step}"))
    toml = folder / "run.toml"
    toml.write_text(
        f'[job]\ndump_folder = "{folder}"\n[model]\nflavor = "debug"\n[boost]\nlinear = "{linear}"\n'
        f'[training]\nseq_len = {SEQ_LEN}\n[validation]\ndataset = "stdlib_validation"\nseq_len = {SEQ_LEN}\n'
    )
    return toml
