"""``torchtitan_ext.start_warnings``: each start-up warning that cannot apply to a BOOST run is gone at its
cause, and the check behind it still speaks where it applies (each test has its negative control).
tests/end_to_end/test_log.py reads a whole default run's log for them."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import warnings

import pytest
import torch
import torchtitan.distributed.utils as dist_utils
from torchdata.stateful_dataloader import StatefulDataLoader
from torchtitan.config import ConfigManager
from torchtitan.distributed import ParallelDims

from torchtitan_ext.start_warnings import NCCL_ERROR_HANDLING_ENV, install, peak_flops_without_missing_lspci


def torchtitans_device_utils():
    """A fresh copy of ``torchtitan.tools.utils`` (whose ``get_peak_flops`` the CPU adapter replaces in the
    imported one): torchtitan's own peak-FLOPs lookup, with its ``lspci`` probe."""
    import torchtitan.tools.utils as utils

    spec = importlib.util.spec_from_file_location("torchtitan_tools_utils_copy", utils.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "device_name, peak",
    [("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12)],
)
def test_peak_flops_reads_the_device_name_where_there_is_no_lspci(
    device_name, peak, tmp_path, monkeypatch, caplog
):
    utils = torchtitans_device_utils()
    monkeypatch.setenv("PATH", str(tmp_path))  # no lspci on it
    with caplog.at_level(logging.WARNING):
        assert utils.get_peak_flops(device_name) == peak
    assert "Error running lspci" in caplog.text  # torchtitan's own: the line a GPU start logged
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert peak_flops_without_missing_lspci(utils.get_peak_flops, utils)(device_name) == peak
    assert caplog.text == ""


def test_peak_flops_still_asks_lspci_where_there_is_one(tmp_path, monkeypatch):
    utils = torchtitans_device_utils()
    lspci = tmp_path / "lspci"
    lspci.write_text(
        "#!/bin/sh\necho '01:00.0 3D controller: NVIDIA Corporation GH100 [H100 NVL] (rev a1)'\n"
    )
    lspci.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    # the bus says NVL whatever the name: the probe ran
    assert peak_flops_without_missing_lspci(utils.get_peak_flops, utils)("NVIDIA H100 80GB HBM3") == 835e12


def _parse(hf_assets_path: str):
    argv = ["--job.custom_config_module", "torchtitan_ext.config", "--model.hf_assets_path", hf_assets_path]
    return ConfigManager().parse_args(argv)


def test_the_offline_tokenizer_is_no_missing_assets_folder_and_a_missing_folder_still_is(caplog):
    install()
    with caplog.at_level(logging.WARNING):
        job = _parse("")
    assert job.model.hf_assets_path == "" and "does not exist" not in caplog.text
    with caplog.at_level(logging.WARNING):
        _parse("/no/such/assets")
    assert "HF assets path /no/such/assets does not exist!" in caplog.text


def _dims(tp: int = 1) -> ParallelDims:
    return ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=tp, pp=1, ep=1, etp=1, world_size=tp)


def test_float32_gets_no_autocast_and_no_word_and_bf16_its_autocast(caplog):
    install()
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        for dims in (_dims(), _dims(tp=2)):  # one device (autocast), TP without FSDP
            assert isinstance(dist_utils.maybe_enable_amp(dims, "float32", "cpu"), contextlib.nullcontext)
    assert [str(w.message) for w in caught] == [] and caplog.text == ""
    amp = dist_utils.maybe_enable_amp(_dims(), "bfloat16", "cpu")
    assert isinstance(amp, torch.autocast) and amp.fast_dtype == torch.bfloat16


def test_data_parallel_replicas_compute_in_fsdp2s_precision_not_under_autocast():
    # replicas are HSDP at a shard degree of 1 (torchtitan's fsdp_enabled is False there): FSDP2 casts the
    # parameters, and autocast on top would compute another function than the sharded layouts'
    install()
    replicas = ParallelDims(dp_replicate=2, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1, world_size=2)
    for precision in ("float32", "bfloat16"):
        assert isinstance(dist_utils.maybe_enable_amp(replicas, precision, "cpu"), contextlib.nullcontext)


def test_a_cpu_rank_drops_nccls_variable_before_torchtitan_reads_it(monkeypatch):
    from torchtitan_ext.cpu import on_cpu

    monkeypatch.setenv(NCCL_ERROR_HANDLING_ENV, "1")  # as torchrun sets it for every worker
    install()
    assert (NCCL_ERROR_HANDLING_ENV in os.environ) == (not on_cpu())


def _set_vital_warnings(quieted: bool) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if quieted:
            install()  # its filter goes in front of "always", as it goes in front of Python's defaults
        StatefulDataLoader([1, 2])
    return [str(w.message) for w in caught if "set_vital" in str(w.message)]


def _torch_deprecates_set_vital() -> bool:
    """Whether this torch warns at ``torch.set_vital`` (2.13 on; 2.11 has no warning to quiet)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.set_vital  # noqa: B018
    return any("set_vital" in str(w.message) for w in caught)


def test_torchdatas_set_vital_call_is_quiet_and_only_it():
    deprecated = _torch_deprecates_set_vital()
    # the cause: torchdata calls torch's deprecated no-op (where this torch deprecates it)
    assert bool(_set_vital_warnings(quieted=False)) == deprecated
    assert _set_vital_warnings(quieted=True) == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        install()
        torch.set_vital  # noqa: B018 - anyone else's lookup still warns
    assert any("set_vital" in str(w.message) for w in caught) == deprecated


class TransformerBlock(torch.nn.Module):
    """Named as BOOST's block: FSDP2 wraps it as ``FSDPTransformerBlock``. Returns a view, as a LaX block's
    carries and a compiled block's aliased output are."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).view(-1)


class SomeoneElsesBlock(TransformerBlock):
    pass


def _fsdp2_view_output_warnings(block: type[torch.nn.Module], quieted: bool) -> list[str]:
    """FSDP2's warnings from one forward of ``block`` sharded on rank 0 of 2 (the fake process group)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        module = fully_shard(block(), mesh=init_device_mesh("cpu", (2,)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if quieted:
                install()
            module(torch.ones(2, 4))
    finally:
        dist.destroy_process_group()
    return [str(w.message) for w in caught if "returned a view tensor" in str(w.message)]


def test_fsdp2s_view_output_warning_is_quiet_for_boosts_modules_and_only_them():
    # the cause: FSDP2 warns at any wrapped module's view output (torch 2.13 on; 2.11 has no such warning)
    warns = bool(_fsdp2_view_output_warnings(SomeoneElsesBlock, quieted=False))
    assert warns or torch.__version__ < "2.13", torch.__version__
    assert bool(_fsdp2_view_output_warnings(TransformerBlock, quieted=False)) == warns
    assert _fsdp2_view_output_warnings(TransformerBlock, quieted=True) == []
    # another module's view output still warns
    assert bool(_fsdp2_view_output_warnings(SomeoneElsesBlock, quieted=True)) == warns
