"""The route's deliberate refusals, apart from the torch modules so the graph preparation can raise them without
importing torch."""


class Unsupported(NotImplementedError):
    """A form of an op (an attribute value, string labels, an op newer than opset 17) xc's route does not compute:
    a refusal, not unfinished work. The route says it in one line, with the node, and what the user can do
    instead."""


class RouteError(RuntimeError):
    """Why an ONNX model could not become a PyTorch program: one line naming the op and what to do. `unexpected`:
    the type name of the exception it wraps when that was a failure nobody foresaw (a bug of the route, not a form
    it knowingly refuses)."""

    def __init__(self, message: str, unexpected: BaseException | str | None = None):
        super().__init__(message)
        self.unexpected = type(unexpected).__name__ if isinstance(unexpected, BaseException) else unexpected


# What a user can do when an op stops the route, by op type (the default: the last entry's advice).
ADVICE = {
    "NonMaxSuppression": "its converter needs torchvision, which xc cannot install beside the CPU torch; analyse "
                         "the model without its post-processing (cut the graph before NMS)",
    "RoiAlign": "its converter needs torchvision, which xc cannot install beside the CPU torch",
    "Loop": "a loop with a data-dependent trip count has no static PyTorch form; export the model with the loop "
            "unrolled, or upload it as a PyTorch program (.pt2)",
    "Scan": "export the model with the scan unrolled, or upload it as a PyTorch program (.pt2)",
    "STFT": "export the model with the STFT as a convolution (many audio exporters offer it), or as a .pt2",
    "DFT": "export the model with the DFT as a convolution, or as a .pt2",
}
DEFAULT_ADVICE = ("upload the model as a PyTorch program (.pt2, torch.export) if you have it, or re-export the "
                   "ONNX without this op; the ONNX Runtime and OpenVINO targets still analyse the ONNX as it is")
