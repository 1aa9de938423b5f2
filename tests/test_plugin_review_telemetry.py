"""Review: the telemetry's idle flush (BEFORE Scheduler.on_idle) never raises into SGLang's scheduler."""
from controller import contract
from controller.plugin.instance import Plugin


def test_idle_flush_with_an_unusable_address_does_not_raise_into_on_idle():
    """announce() (after init_cuda_graphs, and after every set_internal_state) makes the next idle pass open the
    socket: a connect error (an address zmq refuses, an ipc path over the unix limit) must not leave the hook."""
    for address in ("bogus", "ipc:///tmp/" + "x" * 200 + "/t.ipc"):
        plugin = Plugin({contract.ENV_ADDRESS: address}, rank=lambda: 0)
        plugin.telemetry.announce()
        plugin.telemetry.flush(object())          # Scheduler.on_idle's BEFORE hook: must not raise
        plugin.telemetry.flush(object())          # ... nor on the next idle pass
        assert "telemetry socket" in plugin.failures.places and plugin.telemetry.sock is False
