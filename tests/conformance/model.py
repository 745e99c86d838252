"""A tiny Llama model directory for vLLM's dummy weights: config.json, and a byte-level BPE tokenizer
trained offline on the licence texts every Debian system has, saved as a Hugging Face tokenizer with a
chat template. No weights: vLLM serves it with --load-format dummy (random weights), so the text is
noise, but the wire format, the token counts and vLLM's own metrics are real.

    python model.py DIR    # writes DIR/config.json, DIR/tokenizer.json, ...
"""

import json
import os
import sys

VOCAB = 2000
CORPUS = "/usr/share/common-licenses"

# Roles and text only: content given as a list of parts (Responses, Anthropic) is joined.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def corpus_files():
    files = []
    for name in sorted(os.listdir(CORPUS)):
        path = os.path.join(CORPUS, name)
        if os.path.isfile(path):
            files.append(path)
    if not files:
        raise SystemExit(f"model.py: no text to train a tokenizer on in {CORPUS}")
    return files


def write_tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(corpus_files(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return tok.get_vocab_size()


def write_config(out):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        # 16 fails on vLLM's CPU attention; 64 works.
        "head_dim": 64,
        "vocab_size": VOCAB,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write(out):
    os.makedirs(out, exist_ok=True)
    size = write_tokenizer(out)
    if size > VOCAB:
        raise SystemExit(f"model.py: tokenizer has {size} tokens, the model {VOCAB}")
    write_config(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: model.py DIR")
    print(write(sys.argv[1]))
