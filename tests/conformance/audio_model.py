"""Tiny audio model directories for vLLM's dummy weights, in the style of model.py: a config.json, a
tokenizer trained offline on the licence texts every Debian system has, and the feature extractor /
processor files vLLM asks transformers for. No weights: vLLM serves them with --load-format dummy
(random weights), so the transcripts are noise, but the routes, the wire format and the usage are real.

    python audio_model.py whisper DIR             # WhisperForConditionalGeneration: /v1/audio/transcriptions
                                                   # and /translations (vLLM's tasks: transcription only)
    python audio_model.py qwen3-asr-realtime DIR  # Qwen3ASRRealtimeGeneration: /v1/realtime as well

Run it with the vLLM virtualenv's python (~/.cache/tokentap-conformance/vllm/bin/python): the
Qwen3-ASR feature extractor needs torch, and the files are then written by the transformers vLLM reads
them with. (whisper also works from the clients' virtualenv.)

Serve (the suite's flags, servers.py), e.g.:
    vllm.entrypoints.openai.api_server --model DIR --served-model-name tiny-qwen3-asr --load-format dummy
        --dtype float32 --enforce-eager --max-model-len 4096 ...   (whisper: --max-model-len 448)
vLLM decodes uploads with soundfile: the vLLM virtualenv needs `soundfile` (vllm's [audio] extra:
soundfile, scipy, av); without it every transcription answers 400 "Invalid or unsupported audio file."
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as text_model  # noqa: E402

BPE_VOCAB = 1500


def train_bpe(vocab_size, special):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(text_model.corpus_files(), trainer)
    return tok


# ------------------------------------------------------------------------------------------- Whisper


def whisper_tokenizer(out):
    """A WhisperTokenizer over a small byte-level BPE, with Whisper's special tokens in Whisper's order:
    <|endoftext|>, <|startoftranscript|>, one per language, <|translate|>, <|transcribe|>,
    <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, then <|0.00|> … <|30.00|>. vLLM's
    prompt is "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>" (vllm/model_executor/models/
    whisper.py, get_generation_prompt); it also reads "<|0.00|>" for verbose_json."""
    from tokenizers import AddedToken
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, WhisperTokenizer

    bpe = train_bpe(BPE_VOCAB, ["<|endoftext|>"])
    state = json.loads(bpe.to_str())["model"]
    vocab, merges = state["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                     for m in state["merges"]]
    tok = WhisperTokenizer(vocab=vocab, merges=merges)
    specials = (["<|startoftranscript|>"] + [f"<|{code}|>" for code in LANGUAGES]
                + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                   "<|notimestamps|>"])
    tok.add_special_tokens({"additional_special_tokens": specials})
    # Timestamps are ordinary added tokens in Whisper's own tokenizers (not "special").
    tok.add_tokens([AddedToken(f"<|{i * 0.02:.2f}|>", special=False, normalized=False) for i in range(1501)])
    return tok


def write_whisper(out):
    from transformers import WhisperFeatureExtractor
    from transformers.models.whisper.processing_whisper import WhisperProcessor

    os.makedirs(out, exist_ok=True)
    tok = whisper_tokenizer(out)
    fe = WhisperFeatureExtractor(feature_size=80, sampling_rate=16000, hop_length=160, chunk_length=30, n_fft=400)
    WhisperProcessor(feature_extractor=fe, tokenizer=tok).save_pretrained(out)
    size = len(tok)
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    sot = tok.convert_tokens_to_ids("<|startoftranscript|>")
    config = {
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": size,
        "num_mel_bins": 80,
        "d_model": 128,
        # 2 heads of 64: head_dim 16 fails on vLLM's CPU attention (model.py).
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_layers": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 256,
        "decoder_ffn_dim": 256,
        # 30 s of audio = 3000 mel frames, halved by the second conv: Whisper's own sizes.
        "max_source_positions": 1500,
        "max_target_positions": 448,
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "bos_token_id": eot,
        "eos_token_id": eot,
        "pad_token_id": eot,
        "decoder_start_token_id": sot,
        "begin_suppress_tokens": [],
        "suppress_tokens": [],
        "is_encoder_decoder": True,
        "use_cache": True,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # The decoder prompt and eos vLLM's generation config defaults read.
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot,
                   "decoder_start_token_id": sot}, f, indent=2)
    return out


# ------------------------------------------------------------------------------------------ Qwen3-ASR

QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
                "<asr_text>"]


def write_qwen3_asr(out, realtime=True):
    """Qwen3-ASR (vLLM: Qwen3ASRForConditionalGeneration; with realtime=True the architecture
    Qwen3ASRRealtimeGeneration, the one vLLM 0.32 serves /v1/realtime with besides Voxtral realtime):
    a tiny audio encoder and a tiny Qwen3 decoder with M-RoPE, a Qwen3ASRFeatureExtractor and a
    byte-level BPE carrying the audio special tokens the processor reads (audio_token, audio_bos_token,
    audio_eos_token)."""
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen3_asr import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

    os.makedirs(out, exist_ok=True)
    bpe = train_bpe(BPE_VOCAB, QWEN_SPECIAL)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"},
    )
    fe = Qwen3ASRFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=30,
                                  n_fft=400, n_window=50)
    Qwen3ASRProcessor(feature_extractor=fe, tokenizer=tok).save_pretrained(out)
    ids = {t: bpe.token_to_id(t) for t in QWEN_SPECIAL}
    vocab = bpe.get_vocab_size()
    hidden = 128
    config = {
        "architectures": ["Qwen3ASRRealtimeGeneration" if realtime else "Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "torch_dtype": "float32",
        "support_languages": ["English"],
        "thinker_config": {
            "model_type": "qwen3_asr_thinker",
            "audio_token_id": ids["<|audio_pad|>"],
            "audio_start_token_id": ids["<|audio_start|>"],
            "user_token_id": ids["<|im_start|>"],
            "audio_config": {
                "model_type": "qwen3_asr_audio_encoder",
                "num_mel_bins": 128, "d_model": hidden, "encoder_layers": 1, "encoder_attention_heads": 2,
                "encoder_ffn_dim": 256, "max_source_positions": 1500, "n_window": 50, "n_window_infer": 800,
                "conv_chunksize": 500, "downsample_hidden_size": 32, "output_dim": hidden,
                "activation_function": "gelu",
            },
            "text_config": {
                "model_type": "qwen3_asr_text",
                "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": 256, "num_hidden_layers": 2,
                "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64,
                "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                # M-RoPE over head_dim 64: sections add up to 32.
                "rope_scaling": {"rope_type": "default", "mrope_section": [12, 10, 10], "interleaved": True,
                                 "mrope_interleaved": True},
                "tie_word_embeddings": False, "hidden_act": "silu",
                "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            },
        },
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"]},
                  f, indent=2)
    return out


KINDS = {"whisper": write_whisper, "qwen3-asr-realtime": write_qwen3_asr,
         "qwen3-asr": lambda out: write_qwen3_asr(out, realtime=False)}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in KINDS:
        raise SystemExit(f"usage: audio_model.py {{{'|'.join(KINDS)}}} DIR")
    print(KINDS[sys.argv[1]](sys.argv[2]))
