"""On a GPU with SGLang: the experimental start-up warm-up (controller/plugin/warmsizes.py) against SGLang's real
assign_req_to_token_pool kernel writes nothing into req_to_token, and leaves one compiled variant per power-of-two
range it launched (both alignments where Triton tells them apart).

    pytest -m gpu tests/test_gpu_warmsizes.py      (on the H200, after bench/gpu/common.sh's setup)
Skipped without CUDA or SGLang; CI never has either. Whether it removes the first-size cost is bench/gpu's to measure.
"""
from types import SimpleNamespace

import pytest

from controller.plugin import warmsizes

pytestmark = pytest.mark.gpu


def _gpu_and_sglang() -> bool:
    try:
        import sglang.srt.mem_cache.allocation  # noqa: F401
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def test_the_warm_up_writes_nothing_and_compiles_each_range():
    if not _gpu_and_sglang():
        pytest.skip("needs an NVIDIA GPU and SGLang")
    import torch
    from sglang.srt.mem_cache import allocation
    req_to_token = torch.arange(8 * 4096, dtype=torch.int32, device="cuda").reshape(8, 4096)
    before = req_to_token.clone()
    worker = SimpleNamespace(target_worker=SimpleNamespace(model_runner=SimpleNamespace(
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token))))
    assert warmsizes.warm(worker, 128) == 16
    assert torch.equal(req_to_token, before)
    caches = getattr(allocation.assign_req_to_token_pool, "device_caches", None)   # Triton 3.x
    if caches is not None:
        compiled = sum(len(c[0]) for c in caches.values())
        assert compiled >= 8, compiled      # at least one per range 1 ... 128
