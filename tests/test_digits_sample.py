"""digits-mini: the one bundled sample trained on real data (scikit-learn's 8×8 digits, in its wheel). Trained at
build time, deterministically — the same weights in every process and thread — and accurate on the held-out split
it carries as its dataset; the other samples carry none."""
import hashlib
import subprocess
import sys
import threading

import numpy as np
import torch

from xc_core.sources.samples import SAMPLES, bundled_dataset


def _digest(model) -> str:
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def test_the_held_out_split_is_the_dataset_and_the_model_is_accurate_on_it():
    ds = bundled_dataset("digits-mini")
    assert ds.origin == "sample" and ds.labels_from == "scikit-learn digits, held-out 20 %"
    assert ds.classes == [str(c) for c in range(10)] and ds.task == "classification"
    x = ds.arrays["image"]
    assert x.shape == (len(ds), 1, 1, 8, 8) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert 355 <= len(ds) <= 365 and ds.labels.shape == (len(ds),)
    assert np.bincount(ds.labels).min() >= 34             # stratified: every digit held out in proportion
    # Names carry the index in load_digits(): the sample a reader looks up is that image.
    from sklearn.datasets import load_digits
    first = int(ds.sample_names[0].removeprefix("digits[").removesuffix("]"))
    assert np.array_equal(load_digits().images[first] / 16, x[0, 0, 0])
    with torch.no_grad():
        predicted = SAMPLES["digits-mini"].model()(torch.from_numpy(x[:, 0])).argmax(1).numpy()
    assert (predicted == ds.labels).mean() >= 0.95


def test_samples_with_random_weights_carry_no_dataset():
    assert all(bundled_dataset(name) is None for name in SAMPLES if name != "digits-mini")


def test_training_is_the_same_in_threads_and_in_another_process():
    alone = _digest(SAMPLES["digits-mini"].model())
    digests = []
    start = threading.Barrier(3)

    def build():
        start.wait()
        digests.append(_digest(SAMPLES["digits-mini"].model()))
    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert digests == [alone] * 3
    # A fresh process trains again (a worker does): bit for bit the same weights, so the same sha256 and run key.
    code = ("import hashlib; from xc_core.sources.samples import SAMPLES; h = hashlib.sha256()\n"
            "for v in SAMPLES['digits-mini'].model().state_dict().values(): h.update(v.contiguous().numpy().tobytes())\n"
            "print(h.hexdigest())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert other.stdout.strip() == alone


def test_training_leaves_the_callers_torch_settings_alone():
    from xc_core.sources import samples
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    samples._train_digits()
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads and torch.are_deterministic_algorithms_enabled() == deterministic
