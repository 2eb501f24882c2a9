"""torchtitan 0.3's trainer on a CPU machine without triton: a test harness, outside
torchtitan's files (on PYTHONPATH for the train loop's subprocesses of
``tests/trainers/test_torchtitan_train.py``; Python imports ``sitecustomize`` at start).

Five patches, each applied as the torchtitan module it concerns is imported, and only
where no accelerator (and no triton) is there:

1. ``torchtitan.distributed.minimal_async_ep.kernels`` ``import triton`` (GPU only;
   reached from ``torchtitan.trainer`` through the MoE token dispatcher): when its
   import fails only for want of triton, it is kept as a stand-in whose kernels raise
   when called (dense models never call them). A fake ``triton`` package would not do:
   torch would then believe triton is there.
2. ``torchtitan.tools.utils`` falls back to device ``"cuda"`` when torch finds no
   accelerator: its ``device_type, device_module`` become ``"cpu"`` and ``torch.cpu``
   (before any other torchtitan module imports them), save that ``current_device()``
   answers 0, an index as ``torch.cuda``'s does (``torch.cpu``'s answers ``"cpu"``,
   which the trainer's ``barrier(device_ids=[current_device()])`` refuses).
3. ``torchtitan.components.metrics.DeviceMemoryMonitor`` asks
   ``torch.cpu.get_device_name`` (there is none): a stand-in monitor that reports the
   process's peak resident memory.
4. torch 2.13's FlexAttention has no backward on the CPU ("FlexAttention does not
   support backward on CPU"), and torchtitan 0.3's language models take only flex or
   varlen attention (varlen is flash-attention: CUDA only; SDPA is refused). On the CPU,
   ``FlexAttention._compiled_flex_attn`` (torch.compile'd ``flex_attention``) becomes
   its dense equivalent: the block mask's ``mask_mod`` evaluated on every (query, key)
   pair (``create_mask``) and ``scaled_dot_product_attention`` with that boolean mask
   (and the log-sum-exp, when asked, computed from the same masked scores). Same math,
   O(S^2) memory: for the debug model's short sequences. torchtitan's mask
   construction (``get_attention_masks`` from the loader's ``positions``) is its own.
5. ``torchtitan.distributed.utils.set_pg_timeouts`` (after the first step) calls
   ``torch.distributed.set_timeout``, which torch 2.13.0's CPU wheel lacks: where it is
   missing it is lent as ``distributed_c10d._set_pg_timeout`` (same arguments: a
   timedelta and a group, None for the default one).
"""

import importlib.abc
import importlib.util
import sys

_NO_TRITON = importlib.util.find_spec("triton") is None


def _needs_triton(module_name: str, name: str):
    def call(*args, **kwargs):
        raise RuntimeError(f"{module_name}.{name} needs triton, which is not installed")

    call.__name__ = name
    return call


def _tritonless(module, name: str) -> None:
    module.__getattr__ = lambda attr: (
        _needs_triton(name, attr) if not attr.startswith("__")
        else (_ for _ in ()).throw(AttributeError(attr))
    )


class _CPUDeviceModule:
    """``torch.cpu``, but ``current_device()`` is the index 0."""

    def __getattr__(self, name: str):
        import torch

        return getattr(torch.cpu, name)

    @staticmethod
    def current_device() -> int:
        return 0


def _cpu_device(module) -> None:
    import torch

    if module.device_type == "cuda" and not torch.cuda.is_available():
        module.device_type, module.device_module = "cpu", _CPUDeviceModule()


class CPUMemoryMonitor:
    """``DeviceMemoryMonitor``'s interface on the CPU: this process's peak RSS."""

    def __init__(self, device: str = "cpu") -> None:
        import torch

        self.device = torch.device("cpu")
        self.device_name = "cpu"
        self.device_index = 0
        self.device_capacity = self._total_memory()
        self.device_capacity_gib = self._to_gib(self.device_capacity)

    @staticmethod
    def _total_memory() -> int:
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    @staticmethod
    def _to_gib(memory_in_bytes: float) -> float:
        return memory_in_bytes / (1024 ** 3)

    def get_peak_stats(self):
        import resource

        from torchtitan.components.metrics import DeviceMemStats

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        gib, pct = self._to_gib(peak), 100 * peak / self.device_capacity
        return DeviceMemStats(gib, pct, gib, pct, 0, 0)

    def reset_peak_stats(self) -> None:
        pass


def _cpu_monitor(module) -> None:
    import torch

    if not torch.cuda.is_available():
        module.DeviceMemoryMonitor = CPUMemoryMonitor


def _dense_flex_attention(q, k, v, *, score_mod=None, block_mask=None, scale=None,
                          enable_gqa=False, return_aux=None, kernel_options=None):
    """``flex_attention(q, k, v, block_mask=...)`` as dense masked attention (CPU)."""
    import math

    import torch
    from torch.nn.attention.flex_attention import AuxOutput, create_mask
    from torch.nn.functional import scaled_dot_product_attention

    if score_mod is not None:
        raise NotImplementedError("the CPU stand-in of flex attention takes no score_mod")
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[-2]
    mask = None
    if block_mask is not None:
        mask = create_mask(block_mask.mask_mod, batch, 1, q_len, kv_len, device=q.device)
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                       enable_gqa=enable_gqa)
    lse = None
    if return_aux is not None and return_aux.lse:
        if enable_gqa and k.shape[1] != heads:
            k = k.repeat_interleave(heads // k.shape[1], dim=1)
        scores = (q @ k.transpose(-2, -1)) * (scale or 1 / math.sqrt(q.shape[-1]))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(scores.float(), dim=-1)
    return out, AuxOutput(lse=lse)


def _cpu_flex(module) -> None:
    import torch

    if not torch.cuda.is_available():
        module.FlexAttention._compiled_flex_attn = staticmethod(_dense_flex_attention)


def _set_timeout(module) -> None:
    import torch.distributed as dist

    if not hasattr(dist, "set_timeout"):
        from torch.distributed.distributed_c10d import _set_pg_timeout

        def set_timeout(timeout, group=None):
            _set_pg_timeout(timeout, group)

        dist.set_timeout = set_timeout


#: module -> what to do after it executes (the triton stand-in acts on its failure).
AFTER = {
    "torchtitan.tools.utils": _cpu_device,
    "torchtitan.components.metrics": _cpu_monitor,
    "torchtitan.models.common.attention": _cpu_flex,
    "torchtitan.distributed.utils": _set_timeout,
}
TRITON_MODULES = {"torchtitan.distributed.minimal_async_ep.kernels"}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner, name: str) -> None:
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self.inner.exec_module(module)
        except ModuleNotFoundError as error:
            if not (_NO_TRITON and self.name in TRITON_MODULES
                    and (error.name or "").split(".")[0] == "triton"):
                raise
            _tritonless(module, self.name)
            return
        if self.name in AFTER:
            AFTER[self.name](module)


class _PatchingFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in AFTER and name not in TRITON_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, name)
                return spec
        return None


sys.meta_path.insert(0, _PatchingFinder())
