"""The ``boost_llama`` train spec and its registration with torchtitan.

Registered once per process, by ``register_boost_train_spec`` in the entry point
(``torchtitan_ext.train``), before torchtitan's trainer looks the spec up: the BOOST trainer trains
this model alone (the preflight refuses any other ``model.name``), so it does not depend on
``--experimental.custom_import``. Importing this module registers nothing.
"""

from torchtitan.components.loss import build_cross_entropy_loss
from torchtitan.protocols.train_spec import TrainSpec, register_train_spec

from boost.training.model import FLAVORS
from boost.training.rules import MODEL_NAME
from torchtitan_ext.data.text_datasets import build_boost_dataloader, build_boost_validator
from torchtitan_ext.data.tokenizer import build_boost_tokenizer
from torchtitan_ext.infra.parallelize import parallelize_boost
from torchtitan_ext.infra.pipeline import pipeline_boost
from torchtitan_ext.metrics import build_boost_metrics_processor
from torchtitan_ext.model import JobModelArgs, JobTransformer
from torchtitan_ext.optimizer import build_boost_lr_schedulers, build_boost_optimizers
from torchtitan_ext.startup_clock import STARTUP


def _build_dataloader(*args, **kwargs):
    with STARTUP.timing("data"):
        dataloader = build_boost_dataloader(*args, **kwargs)
    STARTUP.begin("model")  # torchtitan builds, parallelises and initialises the model next
    return dataloader


def _build_optimizers(*args, **kwargs):
    STARTUP.end("model")  # torchtitan builds the optimizer once the model is initialised
    return build_boost_optimizers(*args, **kwargs)  # torchtitan's, and LORO


def get_train_spec() -> TrainSpec:
    """The train spec, its builders timed for the start-up line (``torchtitan_ext.startup_clock``)."""
    return TrainSpec(
        model_cls=JobTransformer,
        # The [boost] section sets kind, rank and vocabulary in JobModelArgs.update_from_config.
        model_args={name: JobModelArgs.from_flavor(name) for name in FLAVORS},
        parallelize_fn=parallelize_boost,
        pipelining_fn=pipeline_boost,
        build_optimizers_fn=_build_optimizers,
        build_lr_schedulers_fn=build_boost_lr_schedulers,  # torchtitan's, and cosine_restart
        build_dataloader_fn=_build_dataloader,
        build_tokenizer_fn=STARTUP.timed("tokenizer", build_boost_tokenizer),
        build_loss_fn=build_cross_entropy_loss,
        build_validator_fn=STARTUP.timed("data", build_boost_validator),
        build_metrics_processor_fn=STARTUP.timed("metrics", build_boost_metrics_processor),
    )


def register_boost_train_spec() -> None:
    """Register the spec as ``boost.training.rules.MODEL_NAME``; torchtitan raises if a process registers it twice."""
    register_train_spec(MODEL_NAME, get_train_spec())
