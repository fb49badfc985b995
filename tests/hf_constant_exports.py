"""Hugging Face models exported as their users export them, with keyword arguments: `use_cache=False`, tensors by
keyword (`attention_mask=`, `token_type_ids=`) and `return_dict=False`. Tiny configs, seeded random weights,
nothing downloaded.

Run as a program in its own process (`python tests/hf_constant_exports.py OUTDIR`), so that transformers is never
imported where xc reads the files (see tests/hf_models.py). tests/test_constant_inputs.py uses it.
"""
from __future__ import annotations

import os
import sys

VOCAB, SEQ = 512, 8


def qwen2():
    import transformers as tf
    cfg = tf.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return tf.Qwen2ForCausalLM(cfg).eval()


def bert():
    import transformers as tf
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128)
    return tf.BertModel(cfg).eval()


def export_all(out_dir: str) -> dict[str, str]:
    """{name: path} of every program this module writes."""
    import torch
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (1, SEQ))
    mask, types = torch.ones(1, SEQ, dtype=torch.long), torch.zeros(1, SEQ, dtype=torch.long)
    programs = {
        # the issue's decoder, exported as in transformers' own examples
        "qwen2_use_cache": lambda: torch.export.export(qwen2(), (ids,), kwargs={"use_cache": False}),
        # an encoder with its masks by keyword and a tuple output
        "bert_return_tuple": lambda: torch.export.export(
            bert(), (ids,), kwargs={"attention_mask": mask, "token_type_ids": types, "return_dict": False}),
        # tensors by keyword only, no constant
        "bert_keywords": lambda: torch.export.export(bert(), (), kwargs={"input_ids": ids, "attention_mask": mask}),
    }
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, make in programs.items():
        torch.manual_seed(0)
        paths[name] = os.path.join(out_dir, f"{name}.pt2")
        torch.export.save(make(), paths[name])
    return paths


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name, path in export_all(sys.argv[1]).items():
        print(name, path)
