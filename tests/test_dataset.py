"""Loading a dataset for task accuracy (xc_core/inputs/dataset.py): every format it takes, and every refusal as one
line naming the problem and what is accepted."""
import io
import json
import os
import wave
import zipfile

import numpy as np
import pytest

from xc_core.errors import XcInputError
from xc_core.inputs import dataset as ds_mod
from xc_core.inputs.dataset import image_layout, load_dataset
from xc_core.limits import Limits
from xc_core.sources.spec import InputSpec

ONE = [InputSpec("x", [1, 4], "float32")]
IMAGE = [InputSpec("image", [1, 3, 8, 6], "float32")]


def _png(path, colour, size=(20, 10)):
    from PIL import Image
    Image.new("RGB", size, colour).save(path)


def test_an_npz_of_arrays_with_labels_and_samples_without_their_batch_axis(tmp_path):
    x = np.arange(12, dtype=np.float64).reshape(3, 4)           # (samples, 4): the batch-1 axis left out
    np.savez(tmp_path / "d.npz", x=x, labels=np.array([0, 1, 1]))
    ds = load_dataset(str(tmp_path / "d.npz"), ONE)
    assert ds.arrays["x"].shape == (3, 1, 4) and ds.arrays["x"].dtype == np.float32
    assert ds.labels.tolist() == [0, 1, 1] and ds.sample_names == ["d[0]", "d[1]", "d[2]"]
    assert ds.labels_from == "d.npz: labels"


def test_a_missing_input_takes_the_runs_value_for_every_sample(tmp_path):
    specs = ONE + [InputSpec("scale", [1], "float32")]
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 1, 4), np.float32))
    ds = load_dataset(str(tmp_path / "d.npz"), specs, feeds={"scale": np.array([2.0], np.float32)})
    assert ds.arrays["scale"].tolist() == [[2.0], [2.0]]
    assert any("'scale' is not in the dataset" in n for n in ds.notes)


def test_a_folder_of_npy_with_labels_csv_and_class_names(tmp_path):
    for i in range(3):
        np.save(tmp_path / f"s{i}.npy", np.full((1, 4), i, np.float32))
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    (tmp_path / "labels.csv").write_text("file,label\ns0.npy,dog\ns1.npy,0\ns2.npy,cat\n")
    ds = load_dataset(str(tmp_path), ONE)
    assert ds.sample_names == ["s0.npy", "s1.npy", "s2.npy"]
    assert ds.labels.tolist() == [1, 0, 0] and ds.classes == ["cat", "dog"]


def test_a_zip_of_per_sample_npz_with_labels_json(tmp_path):
    specs = [InputSpec("a", [1, 2], "float32"), InputSpec("ids", [1, 3], "int64")]
    path = tmp_path / "d.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(2):
            buf = io.BytesIO()
            np.savez(buf, a=np.ones((1, 2), np.float32) * i, ids=np.arange(3)[None])
            z.writestr(f"samples/{i}.npz", buf.getvalue())
        z.writestr("labels.json", json.dumps({"0.npz": 1, "samples/1.npz": 0}))
    ds = load_dataset(str(path), specs)
    assert ds.arrays["ids"].dtype == np.int64 and ds.arrays["a"].shape == (2, 1, 2)
    assert ds.labels.tolist() == [1, 0]


def test_images_are_resized_laid_out_and_preprocessed_by_name(tmp_path):
    _png(tmp_path / "a.png", (255, 0, 0))
    _png(tmp_path / "b.png", (0, 0, 255))
    (tmp_path / "labels.txt").write_text("0\n1\n")
    ds = load_dataset(str(tmp_path), IMAGE)
    x = ds.arrays["image"]
    assert x.shape == (2, 1, 3, 8, 6) and x[0, 0, 0].min() == 1.0 and x[0, 0, 2].max() == 0.0
    assert "NCHW" in ds.notes[0] and "the default" in ds.notes[0] and ds.preprocessing == "image-01"
    ds = load_dataset(str(tmp_path), IMAGE, preprocess="image-imagenet")
    assert np.isclose(ds.arrays["image"][0, 0, 0, 0, 0], (1 - 0.485) / 0.229)
    grey_nhwc = [InputSpec("image", [1, 8, 6, 1], "float32")]
    ds = load_dataset(str(tmp_path), grey_nhwc, preprocess="image-raw")
    assert ds.arrays["image"].shape == (2, 1, 8, 6, 1) and ds.arrays["image"].max() > 1
    assert "NHWC" in ds.notes[0] and image_layout([1, 3, 8, 6]) == "NCHW"


def test_audio_is_mono_in_range_and_cropped_or_padded(tmp_path):
    for name, n in (("short.wav", 50), ("long.wav", 300)):
        with wave.open(str(tmp_path / name), "wb") as w:
            w.setnchannels(2)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes((np.ones((n, 2)) * 16384).astype("<i2").tobytes())
    ds = load_dataset(str(tmp_path), [InputSpec("wave", [1, 100], "float32")])
    x = ds.arrays["wave"]
    assert x.shape == (2, 1, 100)
    assert np.allclose(x[0, 0, :100], 0.5)             # long.wav, cropped (sorted by name)
    assert np.allclose(x[1, 0, :50], 0.5) and np.all(x[1, 0, 50:] == 0)
    assert "16,000 Hz" in ds.notes[0]


def _refused(match, *args, **kwargs):
    with pytest.raises(XcInputError, match=match) as e:
        load_dataset(*args, **kwargs)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_zip_that_leaves_its_folder_is_refused(tmp_path):
    path = tmp_path / "d.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("../evil.npy", b"x")
    _refused("unsafe path", str(path), ONE)


def test_a_pickled_npy_is_refused(tmp_path):
    np.save(tmp_path / "s.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _refused("object array", str(tmp_path), ONE)


def test_too_many_samples_names_the_limit_and_how_to_raise_it(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((5, 1, 4), np.float32))
    msg = _refused("above the 3 limit", str(tmp_path / "d.npz"), ONE, Limits(max_dataset_samples=3))
    assert "--max-dataset-samples" in msg and "XC_MAX_DATASET_SAMPLES" in msg


def test_a_file_above_the_per_file_limit_is_refused(tmp_path):
    np.save(tmp_path / "s.npy", np.zeros((1, 4), np.float32))
    _refused("max-sample-mb", str(tmp_path), ONE, Limits(max_sample_mb=0.0001))


def test_a_shape_that_does_not_fit_the_input_is_refused(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 5), np.float32))
    _refused(r"samples have shape \[5\], the model runs \[1, 4\]", str(tmp_path / "d.npz"), ONE)


def test_unknown_preprocessing_task_and_metric_are_refused(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.zeros((2, 4), np.float32))
    _refused("unknown preprocessing .*image-01", str(tmp_path / "d.npz"), ONE, preprocess="resnet")
    _refused("unknown task", str(tmp_path / "d.npz"), ONE, task="detection")
    _refused("unknown metric", str(tmp_path / "d.npz"), ONE, metric="psnr")


def test_other_refusals_are_one_line(tmp_path):
    np.savez(tmp_path / "d.npz", y=np.zeros((2, 4), np.float32))
    _refused("'y' is not an input of the model", str(tmp_path / "d.npz"), ONE)
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "notes.doc").write_text("x")
    _refused("is not a sample", str(tmp_path / "f"), ONE)
    (tmp_path / "g").mkdir()
    _png(tmp_path / "g" / "a.png", (1, 2, 3))
    (tmp_path / "g" / "labels.txt").write_text("banana\n")
    _refused("need a classes.txt", str(tmp_path / "g"), IMAGE)
    (tmp_path / "g" / "labels.txt").unlink()
    _refused("does not apply to images", str(tmp_path / "g"), IMAGE, preprocess="audio-waveform")
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "broken.png").write_bytes(b"not a png")
    _refused("not a readable image", str(tmp_path / "h"), IMAGE)
    _refused("no such file or folder", str(tmp_path / "nowhere"), ONE)


def test_the_run_folder_copy_reads_back(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.ones((2, 1, 4), np.float32), labels=np.array([1, 0]))
    ds = load_dataset(str(tmp_path / "d.npz"), ONE, task="classification", top_k=2)
    run = tmp_path / "run"
    run.mkdir()
    ds_mod.save(ds, str(run))
    back = ds_mod.read(str(run))
    assert back.labels.tolist() == [1, 0] and back.top_k == 2 and back.task == "classification"
    assert np.array_equal(back.arrays["x"], ds.arrays["x"]) and back.sample_names == ds.sample_names
    assert ds_mod.read(str(tmp_path)) is None


def test_the_dataset_is_part_of_the_run_key(tmp_path):
    from xc_core.run_keys import request_parts, run_key
    np.savez(tmp_path / "d.npz", x=np.ones((2, 1, 4), np.float32))
    without = run_key(**request_parts("abc", toolchains={}))
    with_data = run_key(**request_parts("abc", toolchains={}, dataset=ds_mod.dataset_key(str(tmp_path / "d.npz"))))
    other_k = run_key(**request_parts("abc", toolchains={},
                                      dataset=ds_mod.dataset_key(str(tmp_path / "d.npz"), top_k=3)))
    assert len({without, with_data, other_k}) == 3
    assert ds_mod.dataset_key(None) is None
