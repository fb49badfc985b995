"""Today's model families, as users bring them: Hugging Face `transformers` models built from small configs
(seeded random weights, nothing downloaded), exported the way transformers' and torch's docs say — torch.export.save
(.pt2) and torch.onnx.export(dynamo=True) (.onnx + .onnx.data).

Run as a program in its own process (`python tests/hf_models.py OUTDIR NAME…`), so that transformers is never
imported where xc reads the files: importing it registers its ModelOutput types with torch, which would hide what a
server without transformers sees. tests/test_hf_models.py and bench/hf_models.py use it.
"""
from __future__ import annotations

import os
import sys

BUILDERS = ("gpt2", "vit", "wav2vec2")


def build(name: str):
    """(model, example args) for a tiny `name` with seeded weights."""
    import torch
    import transformers as tf
    torch.manual_seed(0)
    if name == "gpt2":      # a decoder: causal mask built with `&`, tied embeddings, returns CausalLMOutput
        cfg = tf.GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=500, n_positions=64, use_cache=False)
        return tf.GPT2LMHeadModel(cfg).eval(), (torch.randint(0, 500, (1, 16)),)
    if name == "vit":       # an encoder over patches: returns ImageClassifierOutput
        cfg = tf.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                           image_size=32, patch_size=8, num_labels=10)
        return tf.ViTForImageClassification(cfg).eval(), (torch.randn(1, 3, 32, 32),)
    if name == "wav2vec2":  # audio: a conv feature extractor and a weight-normed positional conv
        cfg = tf.Wav2Vec2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                                conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3),
                                num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32)
        return tf.Wav2Vec2ForCTC(cfg).eval(), (torch.randn(1, 4000),)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(BUILDERS)}")


def export(name: str, out_dir: str) -> dict[str, str]:
    """Write OUT/<name>.pt2 and OUT/<name>.onnx (+ .onnx.data, as the dynamo exporter writes it)."""
    import torch
    model, args = build(name)
    os.makedirs(out_dir, exist_ok=True)
    pt2, onnx_path = os.path.join(out_dir, f"{name}.pt2"), os.path.join(out_dir, f"{name}.onnx")
    torch.export.save(torch.export.export(model, args), pt2)
    torch.onnx.export(model, args, onnx_path, dynamo=True, external_data=True)
    return {"pt2": pt2, "onnx": onnx_path}


if __name__ == "__main__":
    import contextlib
    import io
    out = sys.argv[1]
    for n in sys.argv[2:] or BUILDERS:
        with contextlib.redirect_stdout(io.StringIO()):     # the exporter's progress lines
            paths = export(n, out)
        print(n, paths["pt2"], paths["onnx"])
