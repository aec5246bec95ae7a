"""Build a tiny random-weight Llama (tokenizer included) for the embedded vLLM backend.

Run with the vLLM virtualenv's Python (it has torch, transformers and tokenizers), not imported
by specsweep:  python make_tiny_model.py OUT_DIR

No hub: the byte-level BPE tokenizer is trained on the Python standard library's own sources.
Sizes follow shared/reference/vllm-cpu.md: the CPU attention needs a head size of at least 32.
A random model repeats itself, so n-gram drafts are accepted: the counter arithmetic is exact
and testable, the acceptance itself says nothing about a real model.
"""

import sys
import sysconfig
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 2048
MAX_POSITIONS = 4096
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def corpus() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[:120]  # a fixed, sorted slice: the same text every time
    return [f.read_text(errors="replace") for f in files]


def main(out: Path) -> None:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=MAX_POSITIONS)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         max_position_embeddings=MAX_POSITIONS, bos_token_id=fast.bos_token_id,
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, torch_dtype="bfloat16")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    print(f"tiny model in {out}: vocab {len(fast)}, {sum(p.numel() for p in model.parameters()):,} parameters")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
