"""The classes Model Explorer registers (it imports this module by name): the adapter "xc" and the node-data
provider "xc overlays". Each method hands over to xc_core.explorer and turns its dicts into Model Explorer's
dataclasses; a refusal there is the one-line error the UI shows."""
from __future__ import annotations

import dacite
from model_explorer import (
    Adapter,
    AdapterMetadata,
    GetConfigEditorsResult,
    NodeDataProvider,
    NodeDataProviderFilter,
    NodeDataProviderMetadata,
    NodeDataProviderResult,
    config_editor,
    graph_builder,
    node_data_builder,
)

from xc_core import explorer
from xc_core.errors import XcInputError

# Categorical overlays carry strings where node_data_builder types numbers (the UI takes either): no type check.
_LOOSE = dacite.Config(check_types=False)


class XcAdapter(Adapter):
    metadata = AdapterMetadata(
        id=explorer.ADAPTER_ID, name="xc",
        description="The graph xc captured from a .pt2, .onnx or .tflite; an .xcrun (xc explorer RUN): the captured "
                    "graph and each compiled target's.",
        fileExts=list(explorer.FILE_EXTS))

    def convert(self, model_path: str, settings: dict):
        converted = explorer.convert(model_path)
        if "graphs" in converted:
            return {"graphs": [dacite.from_dict(graph_builder.Graph, g, config=_LOOSE) for g in converted["graphs"]]}
        return {"graphCollections": [dacite.from_dict(graph_builder.GraphCollection, c, config=_LOOSE)
                                     for c in converted["graphCollections"]]}


class XcOverlays(NodeDataProvider):
    metadata = NodeDataProviderMetadata(
        id=explorer.PROVIDER_ID, name="xc overlays", icon="memory",
        description="A target's decisions on this graph: backend, CPU fallback and its reason, precision, per-node "
                    "time, layer drift — each with its evidence kind; analysed on demand, kept in xc's run store.",
        filter=NodeDataProviderFilter(adapterIds=[explorer.ADAPTER_ID]))

    def get_config_editors(self, provider_id: str) -> GetConfigEditorsResult:
        editors = [dacite.from_dict(config_editor.DropDownConfigEditor, e) for e in explorer.config_editors()]
        return GetConfigEditorsResult(configEditors=editors)

    def run(self, provider_id, model_path, graph_id, config_values, graph) -> NodeDataProviderResult:
        try:
            data = explorer.overlay(model_path, graph_id, config_values or {})
        except (explorer.Unavailable, XcInputError) as e:
            return NodeDataProviderResult(error=str(e))
        return NodeDataProviderResult(result=dacite.from_dict(node_data_builder.GraphNodeData, data, config=_LOOSE))
