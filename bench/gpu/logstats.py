"""SGLang's own scheduler log lines between two byte offsets of a server log: decode and prefill batches.

    python3 bench/gpu/logstats.py LOG START_BYTE END_BYTE [--label L]
Prints one LOGSTATS JSON line: decode lines (mean #running-req, median gen throughput, share on CUDA
graphs, mean #queue-req) and prefill lines (count, mean #new-seq, mean #new-token) in that stretch.
"""
from __future__ import annotations

import json
import re
import statistics
import sys

NUM = r"([0-9.]+)"


def stats(text: str) -> dict:
    dec = [ln for ln in text.splitlines() if "Decode batch" in ln]
    pre = [ln for ln in text.splitlines() if "Prefill batch" in ln]
    grab = lambda lines, key: [float(m.group(1)) for ln in lines if (m := re.search(re.escape(key) + r":? " + NUM, ln))]
    running, gen, queue = grab(dec, "#running-req"), grab(dec, "gen throughput (token/s)"), grab(dec, "#queue-req")
    graphs = [("graph: True" in ln) or ("cuda graph: True" in ln) for ln in dec]
    new_seq, new_tok = grab(pre, "#new-seq"), grab(pre, "#new-token")
    mean = lambda xs: round(statistics.mean(xs), 2) if xs else None
    return {"decode_lines": len(dec), "running_mean": mean(running), "gen_tok_s_median":
            round(statistics.median(gen), 1) if gen else None, "queue_mean": mean(queue),
            "graph_share": mean([float(g) for g in graphs]), "prefill_lines": len(pre),
            "new_seq_mean": mean(new_seq), "new_token_mean": mean(new_tok)}


def main() -> None:
    path, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    label = sys.argv[sys.argv.index("--label") + 1] if "--label" in sys.argv else ""
    with open(path, "rb") as f:
        f.seek(start)
        text = f.read(max(0, end - start)).decode(errors="replace")
    print("LOGSTATS " + json.dumps({"label": label, **stats(text)}), flush=True)


if __name__ == "__main__":
    main()
