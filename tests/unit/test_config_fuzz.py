"""Fuzz the preflight with mutated shipped configs: every variant passes or is refused naming what changed.

A seeded generator takes the TOMLs in train_configs/ and makes one mutation each: drop, rename or
retype a field, set it out of range, add an unknown field or section, swap two sections' contents,
put a scalar where a section belongs, set any numeric field of the schema out of range, or pass a
malformed command-line override. Each variant goes through ``check_job`` (the preflight of
``run_train.sh``) at the world size its original runs at.
A variant either passes, or raises ``ConfigError`` whose message names the mutated field (or a
section it swapped); anything else raised is a crash, and there must be none. A few passing
debug-flavor variants then build the model their config describes and take one optimizer step.
"""

from __future__ import annotations

import math
import random
import re
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

from torchtitan_ext.preflight import ConfigError, check_job, load_toml

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "train_configs").glob("*.toml"))
N_VARIANTS = 300
N_STEPPED = 2  # passing debug variants that also build the model and take a step (~1 s each)
COMMAND_LINE_EVERY = 50  # tyro builds its parser in ~0.25 s per call: a few command-line variants suffice
SEED = 14

# Values of the wrong type for a field, and out-of-range values by type.
WRONG_TYPES = ["abc", 4.5, True, 7, [1, 2], {"nested": 1}]
OUT_OF_RANGE = {int: [0, -1, -1000], float: [0.0, -1.0, math.nan, math.inf], str: ["", "no_such_value"]}


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value > 0 else "-inf")
            if math.isinf(value)
            else repr(value)
        )
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def to_toml(values: dict) -> str:
    """A TOML document for ``values`` (top-level scalars first, then one table per section)."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in values.items() if not isinstance(v, dict)]
    for section, table in values.items():
        if isinstance(table, dict):
            lines.append(f"\n[{section}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _leaves(values: dict) -> list[tuple[str, str]]:
    return [(s, k) for s, table in values.items() if isinstance(table, dict) for k in table]


def _numeric_schema_fields() -> list[tuple[str, str, type]]:
    """Every int/float field of the merged JobConfig (torchtitan's and [boost]), set in a TOML or not."""
    from dataclasses import is_dataclass

    from torchtitan_ext.preflight.config_types import field_types
    from torchtitan_ext.torchtitan_private import merged_job_config_class

    merged = merged_job_config_class(["--job.custom_config_module", "torchtitan_ext.config"], None)
    return [
        (section, name, hint)
        for section, cls in field_types(merged).items()
        if is_dataclass(cls)
        for name, hint in field_types(cls).items()
        if hint in (int, float)
    ]


NUMERIC_FIELDS = _numeric_schema_fields()


def mutate(
    rng: random.Random, values: dict, command_line: bool
) -> tuple[str, dict, list[str], tuple[str, ...]]:
    """One mutation of ``values`` (a command-line override if asked): (kind, new values, extra argv,
    names any refusal must mention)."""
    values = {s: dict(t) if isinstance(t, dict) else t for s, t in values.items()}
    section, key = rng.choice(_leaves(values))
    field, value = f"{section}.{key}", values[section][key]
    names = (
        field,
        key,
    )  # a rule over several fields may name the leaf inside a product ("tensor_parallel_degree × ...")
    kind = (
        "command_line"
        if command_line
        else rng.choice(
            [
                "drop",
                "rename",
                "retype",
                "retype",
                "out_of_range",
                "out_of_range",
                "out_of_range",
                "unknown_field",
                "unknown_section",
                "swap_sections",
                "scalar_section",
                "schema_field",
                "pipeline",
            ]
        )
    )
    if kind == "drop":
        del values[section][key]
    elif kind == "rename":
        renamed = rng.choice([key + "s", key[:-1], key.replace("_", "-"), key.upper()])
        values[section][renamed] = values[section].pop(key)
        names = (f"{section}.{renamed}",)
    elif kind == "retype":
        compatible = (int, float) if type(value) in (int, float) else (type(value),)
        values[section][key] = rng.choice([v for v in WRONG_TYPES if type(v) not in compatible])
    elif kind == "out_of_range":
        pool = OUT_OF_RANGE.get(type(value))
        values[section][key] = (not value) if isinstance(value, bool) else rng.choice(pool) if pool else "abc"
    elif kind == "unknown_field":
        values[section]["zz_unknown"] = 1
        names = (f"{section}.zz_unknown",)
    elif kind == "unknown_section":
        values["zz_section"] = {"x": 1}
        names = ("zz_section",)
    elif kind == "swap_sections":
        other = rng.choice([s for s in values if isinstance(values[s], dict) and s != section])
        values[section], values[other] = values[other], values[section]
        names = (section, other)
    elif kind == "scalar_section":
        values[section] = 5
        names = (section,)
    elif kind == "schema_field":  # any numeric field of the schema, often one the TOML leaves at its default
        section, key, hint = rng.choice(NUMERIC_FIELDS)
        values.setdefault(section, {})[key] = rng.choice(OUT_OF_RANGE[hint])
        names = (f"{section}.{key}", key)
    elif kind == "pipeline":  # the micro-batch split and the stages a schedule runs (PP configs are 13B, 30B)
        values["training"]["local_batch_size"] = rng.choice([1, 2, 3, 4, 6, 9, 16])
        par = values["parallelism"]
        par["pipeline_parallel_microbatch_size"] = rng.choice([1, 1, 2, 3])
        par["pipeline_parallel_schedule"] = rng.choice(
            [
                "1F1B",
                "GPipe",
                "Interleaved1F1B",
                "LoopedBFS",
                "InterleavedZeroBubble",
                "ZBVZeroBubble",
                "DualPipeV",
            ]
        )
        if rng.random() < 0.3:
            par["pipeline_parallel_layers_per_stage"] = rng.choice([0, 1, 2, 5, 10, 20])
        names = (
            "training.local_batch_size",
            *(
                f"parallelism.pipeline_parallel_{name}"
                for name in ("microbatch_size", "schedule", "layers_per_stage")
            ),
        )
    else:  # a malformed command-line override of an existing field
        return kind, values, [f"--{field}", rng.choice(["abc", "4.5", "-1", ""])], (f"--{field}", field, key)
    return kind, values, [], names


def _world_size(values: dict) -> int:
    par = values["parallelism"]
    return par["tensor_parallel_degree"] * par["pipeline_parallel_degree"]


def one_step(job) -> float:
    """Build the model ``job`` describes and take one optimizer step on random tokens; the loss."""
    from torchtitan.components.lr_scheduler import build_lr_schedulers
    from torchtitan.components.optimizer import build_optimizers
    from torchtitan.distributed import ParallelDims

    from boost.training.model import Transformer
    from torchtitan_ext.model import JobModelArgs

    args = JobModelArgs.from_flavor(job.model.flavor)
    args.update_from_config(job)
    model = Transformer(args)
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=1)
    optimizers = build_optimizers([model], job.optimizer, dims)
    schedulers = build_lr_schedulers(optimizers, job.lr_scheduler, job.training.steps)
    # A short batch: the model is the config's; a full 8 × 256 step costs seconds on two shared cores.
    tokens = torch.randint(
        0,
        args.vocab_size,
        (min(job.training.local_batch_size, 2), min(job.training.seq_len, 32) + 1),
        generator=torch.Generator().manual_seed(0),
    )
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), job.training.max_norm)
    optimizers.step()
    schedulers.step()
    return loss.item()


@pytest.fixture
def shipped_values() -> list[tuple[Path, dict]]:
    return [(path, load_toml(str(path))) for path in SHIPPED]


def test_mutated_configs_pass_or_are_refused_naming_the_field(tmp_path, shipped_values, monkeypatch):
    monkeypatch.setenv("BOOST_CACHE", str(tmp_path.parent / "boost-cache"))  # shared with test_train
    rng = random.Random(SEED)
    counts, crashes, unnamed, passed_debug = Counter(), [], [], []
    start = time.perf_counter()
    for i in range(N_VARIANTS):
        source, original = rng.choice(shipped_values)
        kind, values, argv, names = mutate(rng, original, command_line=i % COMMAND_LINE_EVERY == 0)
        variant = tmp_path / f"variant_{i}.toml"
        variant.write_text(to_toml(values))
        label = f"{source.name} {kind} {names[0]} {argv}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # boost.norm = "local" warns, and runs
                job = check_job(["--job.config_file", str(variant), *argv], _world_size(original))
        except ConfigError as e:
            counts["refused"] += 1
            if not any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", str(e)) for n in names):
                unnamed.append(f"{label}: {e}")
        except BaseException as e:  # noqa: BLE001 - anything but a refusal is the failure under test
            counts["crashed"] += 1
            crashes.append(f"{label}: {type(e).__name__}: {e}")
        else:
            counts["passed"] += 1
            if job.model.flavor == "debug" and _world_size(original) == 1:
                passed_debug.append((label, job))
    preflight_s = time.perf_counter() - start

    stepped = rng.sample(passed_debug, min(N_STEPPED, len(passed_debug)))
    for label, job in stepped:
        assert math.isfinite(one_step(job)), label
    print(
        f"\nconfig fuzz: {N_VARIANTS} variants, {counts['passed']} passed, {counts['refused']} refused, "
        f"{counts['crashed']} crashed; preflight {preflight_s:.1f} s; {len(stepped)} stepped; "
        f"{time.perf_counter() - start:.1f} s in all"
    )
    assert not crashes, "\n".join(crashes[:20])
    assert not unnamed, "\n".join(unnamed[:20])
    # The generator must exercise both outcomes, or it tests nothing.
    assert counts["passed"] >= N_VARIANTS // 10 and counts["refused"] >= N_VARIANTS // 2, counts
    assert len(stepped) == N_STEPPED
