"""What model a checkpoint holds: ``boost_model.json`` beside the weights, and the comparison with a job.

Every save writes ``<dump>/checkpoint/step-N/boost_model.json`` (rank 0, before DCP writes the
step's ``.metadata``, so every completed checkpoint has one). One file per step folder, not per run:
it travels with the folder when it is copied elsewhere (``checkpoint.initial_load_path``), it is
deleted with it by ``keep_latest_k``, and a run folder whose checkpoints were written by different
jobs (a seed checkpoint, a resumed run) describes each one truthfully. DCP reads only the files its
``.metadata`` names, so the extra file is invisible to it.

The identity is every ``ModelArgs`` field that changes what the model computes from its weights
(kind, rank, grouping, vocabulary, dims, ...), the flavor, and how the pre-norm normalises; the
parallel layout is *not* part of it: TP/PP/FSDP degrees reshard through DCP. The kind fixes σ and
the LaX crossing, ``lax_gate`` and ``lax_form`` which crossing (a LaX checkpoint of BOOST's earlier,
ungated form records no form and is refused), ``only_lr_act`` the MLP's activation, grouping where
the pre-norms live (inside their grouped reader, or in the block).

The tokenizer is identity too, as a fingerprint of its files' bytes (``tokenizer_fingerprint``):
two tokenizers of one size map text to different ids, and weights trained on one are garbage under
the other. A checkpoint written before the fingerprint was recorded is accepted, with a warning
(``checkpoint_guard.prepare_resume``): its vocabulary size is still compared, and refusing every
older checkpoint would strand runs whose tokenizer is in fact unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
from importlib import metadata
from pathlib import Path

from boost.runtime.checkpoint_folder import MODEL_IDENTITY_FILE
from boost.training.data.tokenizer_fingerprint import tokenizer_fingerprint
from boost.training.model.args import FLAVORS, ModelArgs
from boost.training.rules import KINDS, MODEL_NAME, rms_norm_record

# ModelArgs fields that do not change the weights a checkpoint holds: max_seq_len only sizes the RoPE table
# (a buffer rebuilt at start, never saved), init_seed only draws the initial weights, and the attention
# kernel and mask are how a run attends (a run may stretch its windows onto another kernel or mask); the
# LaX gate's form is how the gate is computed (one function, the same weights).
_NOT_IDENTITY = {"max_seq_len", "init_seed", "attn_type", "attn_mask_type", "lax_gate_form"}

# LaX's form: what a LaX checkpoint computes with its weights. BOOST's LaX before 2026-11-27 added the
# previous block's σ(A·x) after σ, with no gate or norm; a checkpoint of it records no form, and is that.
LAX_FORM = "the LaX authors' crossing: σ(LN(A·x + G(h_prev))), h carried"
LEGACY_LAX_FORM = "BOOST's earlier LaX: σ(A·x) + σ(A_prev·x_prev), no gate or norm"

# Where the user changes a field; the others follow from model.flavor.
_SET_BY = {
    "flavor": "model.flavor",
    "linear": "boost.linear",
    "lax_gate": "boost.lax_gate",
    "lax_form": "the LaX form (BOOST's version)",
    "rank": "boost.rank / boost.rank_ratio",
    "group_linears": "boost.group_linears",
    "only_lr_act": "boost.only_lr_act",
    "rms_norm": "boost.norm",
    "vocab_size": "vocab_size (the tokenizer)",
    "tokenizer": "tokenizer (its files)",
}
_NOTES = {
    "vocab_size": "the vocabulary is the tokenizer's: boost.tokenizer_vocab_size, or model.hf_assets_path",
    "tokenizer": "the tokenizer's files differ: the same ids would mean other tokens; use the tokenizer the "
    "checkpoint was trained with (model.hf_assets_path, or boost.tokenizer_vocab_size and boost.cache_dir)",
    "lax_form": "BOOST now computes LaX as its authors published it (a gated, normalised crossing before σ); "
    "a checkpoint of the earlier form has no gate or norm weights and computed another function: train it on "
    "with the BOOST that wrote it, or start the new LaX in another folder",
}


def boost_version() -> str:
    """The installed BOOST distribution's version (recorded with each checkpoint, not compared)."""
    try:
        return metadata.version("boost-lowrank")
    except metadata.PackageNotFoundError:  # a source tree that was never pip-installed
        return "unknown (not installed)"


def rms_norm_identity(job) -> str:
    """``online`` and ``sync`` compute the exact RMSNorm; ``local`` under BTP normalises each TP shard
    alone, a different model for each TP degree (so with it, the TP degree is identity)."""
    return rms_norm_record(job.boost.norm, job.boost.tp_scheme, job.parallelism.tensor_parallel_degree)


def model_identity(args: ModelArgs, job) -> dict:
    """The identity of the model ``job`` trains, from its resolved ``ModelArgs`` (as the trainer builds them)."""
    identity: dict = {"flavor": job.model.flavor}
    for field in dataclasses.fields(args):
        if not field.name.startswith("_") and field.name not in _NOT_IDENTITY:
            identity[field.name] = getattr(args, field.name)
    identity["n_kv_heads"] = args.kv_heads  # None and n_heads are the same model
    identity["group_linears"] = args.grouped  # the dense kind is never grouped
    if not args.low_rank:
        identity.pop("rank")  # unused by the dense kind
    if KINDS[args.linear].latent_crossing:
        identity["lax_form"] = LAX_FORM
    else:
        identity.pop("lax_gate")  # unused by the kinds that cross nothing
    identity["rms_norm"] = rms_norm_identity(job)
    from torchtitan_ext.data.tokenizer import boost_tokenizer_dir  # built by now: the vocabulary came from it

    identity["tokenizer"] = tokenizer_fingerprint(boost_tokenizer_dir(job))
    return identity


def planned_model_identity(job) -> dict | None:
    """The identity of the model the trainer will build for ``job`` (``None`` for non-BOOST models).

    Built the way torchtitan does it: the flavor's args, then ``update_from_config`` (which reads
    the tokenizer's vocabulary).
    """
    if job.model.name != MODEL_NAME or job.model.flavor not in FLAVORS:
        return None
    from torchtitan_ext.model import JobModelArgs  # reads the tokenizer: only when a checkpoint is checked

    args = JobModelArgs.from_flavor(job.model.flavor)
    args.update_from_config(job)
    return model_identity(args, job)


def write_identity(checkpoint: Path, identity: dict, step: int) -> None:
    """Write ``identity`` into the step folder ``checkpoint`` (atomically: a reader never sees half a file)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    import torch

    # the torch that wrote it: a newer torch's .metadata may not unpickle on an older one, which is told
    # from damage by this (checkpoint_folder.WRITTEN_BY_NEWER_TORCH)
    record = {
        "boost_version": boost_version(),
        "torch_version": torch.__version__,
        "step": step,
        "model": identity,
    }
    tmp = checkpoint / f".{MODEL_IDENTITY_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, checkpoint / MODEL_IDENTITY_FILE)


def identity_differences(saved: dict, wanted: dict) -> list[tuple[str, object, object]]:
    """``(field, saved value, wanted value)`` for each field on which the two models differ.

    A field the checkpoint does not record (written before the field existed) counts as its
    ``ModelArgs`` default, which is what that older code computed with; an unrecorded tokenizer
    is no difference (see ``unrecorded_fields``).
    """
    defaults = {f.name: f.default for f in dataclasses.fields(ModelArgs)}
    if saved.get("linear") == "lax":
        defaults["lax_form"] = LEGACY_LAX_FORM  # a LaX checkpoint that records no form is of the earlier one
    differences = []
    for field, value in wanted.items():
        old = saved.get(field, defaults.get(field, value))
        if old != value:
            differences.append((field, old, value))
    return differences


def unrecorded_fields(saved: dict, wanted: dict) -> list[str]:
    """Identity fields with no ``ModelArgs`` default that ``saved`` (an older checkpoint) does not record."""
    defaults = {f.name for f in dataclasses.fields(ModelArgs)}
    return [field for field in wanted if field not in saved and field not in defaults and field != "flavor"]


def describe_differences(checkpoint: Path, differences: list[tuple[str, object, object]]) -> str:
    """The refusal for resuming ``checkpoint`` as another model: each field, both values, the ways out."""
    width = max(len(_label(field)) for field, _, _ in differences)
    lines = [f"{checkpoint} holds another model than this job asks for:"]
    for field, old, new in differences:
        lines.append(f"  {_label(field):<{width}}  checkpoint: {old!r:<12}  this job: {new!r}")
    lines += [f"  ({_NOTES[field]})" for field, _, _ in differences if field in _NOTES]
    lines += [
        "Resuming would train its weights as a different model. Either ask for the model it holds (the values",
        "above), or leave this folder alone:",
        "  --job.dump_folder NEW_FOLDER   train from scratch in another folder",
        "  --checkpoint.no-enable         train from scratch without loading or saving checkpoints",
    ]
    return "\n".join(lines)


def _label(field: str) -> str:
    return _SET_BY.get(field, f"{field} (from model.flavor)")
