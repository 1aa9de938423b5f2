"""Review of 088cb3f..689c18f: the edges the change set missed."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("host, metrics", [("localhost", "127.0.0.1"), ("LocalHost", "0.0.0.0"),
                                           ("::1", "0:0:0:0:0:0:0:1"), ("0::", "127.0.0.1")])
def test_a_metrics_port_on_sglangs_port_under_another_spelling_of_its_address_is_refused(host, metrics):
    """[sglang] host = "localhost" (or the same address spelt otherwise) with [control] metrics_port = SGLang's port
    passed the check ecde535 added (a string comparison): SGLang bound 127.0.0.1:port, start_metrics failed after the
    engine had loaded, exit 1, restarted for ever - the case that commit meant to refuse."""
    from controller.daemon.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="metrics_port=9100"):
        load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", "port": 9100, "host": host},
                           "control": {"metrics_port": 9100, "metrics_addr": metrics}})
