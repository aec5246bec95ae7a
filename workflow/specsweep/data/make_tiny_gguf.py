"""Write a tiny random-weight Llama as a GGUF file for llama-server, with no hub and no torch.

Run with a Python that has numpy, llama.cpp's own gguf-py on PYTHONPATH (from the pinned
llama-cpp-python source the server is built from), not imported by specsweep:

    PYTHONPATH=<llama.cpp>/gguf-py python make_tiny_gguf.py OUT.gguf

The vocabulary is SentencePiece-style bytes alone: the 256 byte tokens <0x00>..<0xFF> (type BYTE)
after <unk>, <s> and </s>, so any text tokenizes (byte fallback) and the server's /tokenize
counts exactly what it will prefill. Tensor names and shapes are those llama.cpp loads for
LLM_ARCH_LLAMA (src/llama-model.cpp; gguf-py's tensor names: token_embd, blk.N.attn_q, ...).
Random weights repeat themselves under greedy decoding, so n-gram drafts are accepted: the
counters are exact and testable, the acceptance itself says nothing about a real model.
"""

import sys
from pathlib import Path

import gguf
import numpy as np

EMBED, LAYERS, HEADS, KV_HEADS, FF, CONTEXT = 128, 2, 4, 2, 256, 4096
SPECIAL = ["<unk>", "<s>", "</s>"]


def vocabulary() -> tuple[list[str], list[int]]:
    tokens = SPECIAL + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    return tokens, [int(t) for t in types]


def tensors(vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """numpy shapes are (rows, columns) = (out, in); GGUF stores them reversed, as llama.cpp reads them."""
    head = EMBED // HEADS

    def weight(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.5 / np.sqrt(cols)).astype(np.float32)

    out = {"token_embd.weight": weight(vocab, EMBED), "output_norm.weight": np.ones(EMBED, np.float32),
           "output.weight": weight(vocab, EMBED)}
    for n in range(LAYERS):
        out |= {f"blk.{n}.attn_norm.weight": np.ones(EMBED, np.float32),
                f"blk.{n}.attn_q.weight": weight(EMBED, EMBED),
                f"blk.{n}.attn_k.weight": weight(KV_HEADS * head, EMBED),
                f"blk.{n}.attn_v.weight": weight(KV_HEADS * head, EMBED),
                f"blk.{n}.attn_output.weight": weight(EMBED, EMBED),
                f"blk.{n}.ffn_norm.weight": np.ones(EMBED, np.float32),
                f"blk.{n}.ffn_gate.weight": weight(FF, EMBED),
                f"blk.{n}.ffn_up.weight": weight(FF, EMBED),
                f"blk.{n}.ffn_down.weight": weight(EMBED, FF)}
    return out


def main(path: Path) -> None:
    tokens, types = vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama-random")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    for name, data in tensors(len(tokens), np.random.default_rng(0)).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"tiny GGUF in {path}: vocab {len(tokens)}, {LAYERS} layers of {EMBED}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
