"""torchtitan's ``Validator`` for BOOST's model: the trainer's batch preparation, and under context parallelism
the token count of the whole window.

torchtitan 0.2.2's ``Validator.validate`` counts the valid tokens of a batch after its CP sharding, a rank's
share of the window, and then sums the ranks' losses over the ``loss`` mesh (data-parallel × CP): it reports
``cp`` times the loss (2× at cp 2, measured). Its trainer counts before the sharding. It also builds, under CP,
a ``context_parallel`` context from the model's ``freqs_cis`` that it never enters (BOOST's model has no
``freqs_cis``: RoPE takes torchtitan's ``positions``). ``BoostValidator.validate`` is torchtitan's, with the
count taken before the sharding, as the trainer takes it, and without that context; a pipeline rank without
the last stage logs -1, the training line's placeholder (torchtitan's -1 divided by the token count).

Every data-parallel rank runs the same number of validation batches, or one would leave the loop while the
others wait for it in a collective (gloo: a size mismatch; NCCL: a hang until the timeout). A text corpus
splits by documents, so the ranks' shares differ in length: with ``validation.steps`` set, each rank's
loader re-reads its share from the start (``data.text_datasets``), and with ``-1`` (the whole set) the ranks
agree before each batch to stop at the shortest share.
"""

from __future__ import annotations

import time

import torch
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.distributed.tensor import DTensor
from torchtitan.components.loss import IGNORE_INDEX
from torchtitan.components.validate import Validator
from torchtitan.distributed import utils as dist_utils
from torchtitan.tools import utils

from torchtitan_ext.infra.context_parallel import counted_labels, prepare_job_batch


class BoostValidator(Validator):
    def post_dataloading_process(self, input_dict, labels, model_parts):
        """The trainer's (``context_parallel.prepare_job_batch``): every kernel's masks, and under CP this rank's
        share of the sequence with the SDPA mask's rows."""
        model = model_parts[0]
        return prepare_job_batch(
            model, self.tokenizer, input_dict, labels, self.parallel_dims, self.job_config
        )

    @torch.no_grad()
    def validate(self, model_parts: list[nn.Module], step: int) -> None:
        """torchtitan 0.2.2's ``Validator.validate``, with the valid tokens counted before the CP sharding, and the
        loss one mean over every batch's tokens (torchtitan averages the batches' means: a partial last batch
        weighed as much as a whole one, and the loss depended on ``validation.local_batch_size``)."""
        for model in model_parts:
            model.eval()
        parallel_dims = self.parallel_dims
        loss_total = torch.zeros((), device=utils.device_type)  # the batches' loss sums, this rank's share
        tokens_total = torch.zeros((), device=utils.device_type)  # the batches' valid tokens, every dp rank's
        device_type = utils.device_type
        num_steps = 0
        tokens, started = 0, time.perf_counter()  # its own throughput, not the training's counters
        steps = self.job_config.validation.steps
        batches = iter(self.validation_dataloader)
        while steps == -1 or num_steps < steps:
            batch = next(batches, None)
            if steps == -1 and parallel_dims.dp_enabled:
                # the whole set: every rank stops with the one whose share ends first (a host sync a batch)
                here = torch.tensor(int(batch is not None), device=device_type)
                if not int(funcol.all_reduce(here, "min", parallel_dims.get_mesh("batch"))):
                    break
            elif batch is None:
                break
            input_dict, labels = batch
            tokens += labels.numel()
            for k, v in input_dict.items():
                input_dict[k] = v.to(device_type)
            labels = labels.to(device_type)
            # the whole window's tokens, as the trainer counts them (torchtitan counts a CP rank's share; a dry
            # run counts it too: its fake cp mesh sums no other rank's loss)
            local_valid_tokens = (
                counted_labels(labels, parallel_dims, self.job_config) != IGNORE_INDEX
            ).sum()
            inputs, labels, extra_inputs, extra_kwargs = self.post_dataloading_process(
                input_dict, labels, model_parts
            )
            if parallel_dims.dp_enabled:
                global_valid_tokens = dist_utils.dist_sum(
                    local_valid_tokens, parallel_dims.get_mesh("batch"), None
                )
            else:
                global_valid_tokens = local_valid_tokens.float()

            if parallel_dims.pp_enabled:
                with self.validation_context():
                    targets, losses = (labels, []) if self.pp_has_last_stage else (None, None)
                    if self.pp_has_first_stage:
                        self.pp_schedule.eval(
                            inputs, **extra_inputs, **extra_kwargs, target=targets, losses=losses
                        )
                    else:
                        self.pp_schedule.eval(**extra_kwargs, target=targets, losses=losses)
                loss_sum = (
                    torch.sum(torch.stack(losses)).to(device_type)
                    if self.pp_has_last_stage
                    else torch.tensor([-1.0], device=device_type)
                )
            else:
                with self.validation_context():
                    assert len(model_parts) == 1
                    with self.maybe_enable_amp:
                        predictions = model_parts[0](inputs, **extra_inputs, **extra_kwargs)
                        loss_sum = self.loss_fn(predictions, labels)
            loss_sum = loss_sum.detach()
            if isinstance(loss_sum, DTensor):  # loss-parallel TP's replicated loss, added into a plain tensor
                loss_sum = loss_sum.full_tensor()
            loss_total += loss_sum.sum()
            tokens_total += global_valid_tokens
            num_steps += 1

        # one token mean over every batch: a partial last batch weighs its tokens, not a whole batch's share
        loss = loss_total / tokens_total
        if parallel_dims.dp_cp_enabled:
            global_avg_loss = dist_utils.dist_sum(loss, parallel_dims.get_optional_mesh("loss"))
        else:
            global_avg_loss = loss.item()
        if parallel_dims.pp_enabled and not self.pp_has_last_stage:
            # no loss here: the training line's placeholder, not torchtitan's -1 / tokens (-0.0005)
            global_avg_loss = -1.0
        self.metrics_processor.log_validation(
            loss=global_avg_loss, step=step, tokens=tokens, seconds=time.perf_counter() - started
        )
        for model in model_parts:
            model.train()
