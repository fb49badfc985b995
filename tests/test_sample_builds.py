"""A bundled sample is the same model however many threads build it at once: the dashboard's warm-up thread and a
first visitor both hash it for the run key, and two different hashes meant two analyses of one request."""
import hashlib
import threading

import torch


def _weights_digest(model) -> str:
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_concurrent_builds_of_a_sample_give_the_same_weights():
    from xc_core.sources.samples import SAMPLES
    alone = _weights_digest(SAMPLES["tts-mini"].model())
    start = threading.Barrier(6)

    def build():
        start.wait()            # all at once, as the warm-up and a first visitor do
        digests.append(_weights_digest(SAMPLES["tts-mini"].model()))
    digests = []
    threads = [threading.Thread(target=build) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert digests == [alone] * 6


def test_building_a_sample_leaves_the_callers_random_state_alone():
    from xc_core.sources.samples import SAMPLES
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    SAMPLES["vision-mini"].model()
    assert torch.equal(torch.rand(3), expected)
