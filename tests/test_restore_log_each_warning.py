"""helper-94: both saved thresholds above a smaller engine's largest batch (a pin of 250 and a learned 256, then a
start on a profile of max batch 128) logged one warning: both went through one format string, and the log's
RepeatFilter holds back a warning whose format string passed within the minute. Each now says its own."""
from controller.daemon.restore import saved_batch_size
from tests.conftest import repeat_filtered


def test_the_pin_and_the_learned_threshold_each_say_they_were_clipped():
    with repeat_filtered() as records:
        saved = {"pinned": 250, "threshold": 256, "bad": -3, "worse": "x"}
        assert [saved_batch_size(saved, key, 128) for key in ("pinned", "threshold", "bad", "worse")] == [
            128, 128, None, None]
    assert [r.getMessage() for r in records] == [
        "saved pinned=250 is above the engine's largest batch; taken as 128 (every batch speculates)",
        "saved threshold=256 is above the engine's largest batch; taken as 128 (every batch speculates)",
        "saved bad=-3 is not a batch size (0 .. 128); ignored",
        "saved worse='x' is not a batch size (0 .. 128); ignored"]
