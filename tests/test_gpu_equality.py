"""On a GPU with SGLang: greedy outputs are identical with speculation never (fast off path), always,
and switching every few batches, on the crafted clear-margin model (bench/gpu/mkmodel.py --crafted).

    pytest -m gpu tests/test_gpu_equality.py      (on the H200, after bench/gpu/common.sh's setup)
Skipped without CUDA or SGLang; CI never has either. The throughput figures live in bench/gpu/.
"""
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "gpu"))


def _gpu_and_sglang() -> bool:
    try:
        import sglang  # noqa: F401
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not _gpu_and_sglang():
        pytest.skip("needs an NVIDIA GPU and SGLang")
    root = tmp_path_factory.mktemp("gpu")
    subprocess.run([sys.executable, str(ROOT / "bench/gpu/mkmodel.py"), str(root), "--crafted", "--layers", "4"],
                   check=True)
    config = root / "adaptive.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [0, 3]}}))
    port = 30077
    env = {**os.environ, "SPEC_CONTROLLER_INITIAL_THRESHOLD": "0"}
    log = open(root / "engine.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(root / "target"),
                             "--port", str(port), "--host", "127.0.0.1", "--attention-backend", "triton",
                             "--mem-fraction-static", "0.5", "--cuda-graph-max-bs-decode", "32",
                             "--cuda-graph-backend-prefill", "disabled", "--grammar-backend", "none",
                             "--sampling-backend", "pytorch", "--max-running-requests", "32",
                             "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(root / "eagle3"),
                             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                             "--speculative-num-draft-tokens", "4", "--speculative-adaptive",
                             "--speculative-adaptive-config", str(config)], env=env, stdout=log, stderr=log)
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except OSError:
            assert proc.poll() is None, (root / "engine.log").read_text()[-3000:]
            time.sleep(2)
    yield port, json.loads((root / "target" / "next.json").read_text()), root / "engine.log"
    proc.terminate()
    proc.wait(60)


def run_chain_check(port, nxt, toggle=None):
    import greedy
    prompts = greedy.prompts(64, 32, 32000, seed=5)
    run = greedy.generate_all(port, prompts, [48] * len(prompts), 16, list(toggle) if toggle else None, 5.0)
    bad = [i for i, (ids, out) in enumerate(zip(prompts, run["outputs"])) if out != greedy.chain(nxt, ids[-1], 48)]
    return bad, run["accepts"], run["sent"]


def test_never_always_and_switching_give_the_same_tokens(server):
    import greedy
    port, nxt, log = server
    assert greedy.set_threshold(port, 0)
    bad, _, _ = run_chain_check(port, nxt)
    assert bad == [], f"fast off path: prompts {bad[:5]} differ"
    assert "fast off path ready" in log.read_text()
    assert greedy.set_threshold(port, 1024)
    bad, accepts, _ = run_chain_check(port, nxt)
    assert bad == [] and accepts and min(accepts) > 1.5     # drafts were accepted, outputs unchanged
    bad, _, changes = run_chain_check(port, nxt, toggle=(0, 1024))
    assert bad == [] and changes > 10


def test_an_invalid_threshold_is_refused_and_changes_nothing(server):
    import greedy
    port, nxt, _ = server
    assert greedy.set_threshold(port, 0)
    assert not greedy.set_threshold(port, -3)
    bad, accepts, _ = run_chain_check(port, nxt)
    assert bad == [] and (not accepts or max(accepts) < 1.2)    # still off
