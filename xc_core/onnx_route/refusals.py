"""The route's deliberate refusals, apart from the torch modules so the graph preparation can raise them without
importing torch."""


class Unsupported(NotImplementedError):
    """A form of an op (an attribute value, string labels, an op newer than opset 17) xc's route does not compute:
    a refusal, not unfinished work. The route says it in one line, with the node, and what the user can do
    instead."""
