"""xc_core/sources/formats.py: one table of source formats that the loader, the service and the uploader read."""
import pytest

from xc_core.sources import formats, sniff


def test_every_content_the_sniffer_names_as_a_model_has_a_format():
    # sniff.py's kinds, less the ones that are not a model (inputs .npz, a refused pickle, unknown bytes)
    kinds = {sniff.PT2, sniff.TORCHSCRIPT, sniff.TORCH_ZIP, sniff.MLPACKAGE_ZIP, sniff.OPENVINO_ZIP, sniff.ONNX,
             sniff.MLMODEL, sniff.SAFETENSORS, sniff.TFLITE}
    assert kinds <= set(formats.BY_KIND), kinds - set(formats.BY_KIND)


def test_the_uploader_offers_every_model_name_and_the_external_data_names():
    from pages._ui import UPLOAD_TYPES
    offered = {"." + t for t in UPLOAD_TYPES}
    assert {e for f in formats.FORMATS for e in f.extensions} <= offered
    assert set(formats.EXTERNAL_DATA_EXTENSIONS) <= offered
    assert len(UPLOAD_TYPES) == len(set(UPLOAD_TYPES))


def test_a_name_of_both_kinds_is_data_beside_an_onnx_and_a_model_alone():
    from xc_core.service import take_upload
    up = take_upload([("m.onnx", b"model"), ("weights.bin", b"w")])
    assert up.model_file == "m.onnx"
    assert take_upload([("model.bin", b"a torch.save file")]).model_file == "model.bin"


@pytest.mark.parametrize("name", ["model.ckpt", "model.lite", "model.torchscript"])
def test_a_format_added_to_the_table_is_a_model_name_for_the_service(name):
    # names the table gained over the service's old hand list: with external data beside them they are a model
    # that is not ONNX, refused in words — not "none of the files is a model"
    from xc_core.errors import XcInputError
    from xc_core.service import take_upload
    with pytest.raises(XcInputError, match="only an ONNX model"):
        take_upload([(name, b"m"), ("m.onnx.data", b"w")])
