#!/usr/bin/env python3
"""Write a tiny llama-architecture GGUF model with random weights for the
`blis observe` tests: llama.cpp loads it, tokenises with its vocabulary,
batches and streams like any model (what it generates is noise).

The vocabulary is a SentencePiece-style ("llama") one: <unk>, <s>, </s>,
the letters, digits and "▁" (space), then every prefix of "▁word" for
each word of blis observe's 100-word prompt vocabulary
(host/src/observe/prompt.rs) and "warm" (the prewarm prompt). llama.cpp's
SentencePiece tokenizer merges adjacent pieces only into pieces of the
vocabulary, so the prefixes are what lets a word become one token; longer
pieces score higher. Weights come from a fixed seed: the same file every
time.

Usage: make_model.py OUT.gguf
"""
import sys

import numpy as np
import gguf

WORDS = """alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike
november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu
apple banana cherry grape lemon mango melon olive peach pear plum berry red green blue
black white brown gray pink gold silver north south east west river lake sea hill stone
tree leaf root seed flower grass rain snow wind cloud storm sun moon star sky fire water
earth iron wood glass paper bread milk salt sugar tea house door road bridge tower city
town field farm horse bird fish wolf bear lion tiger warm""".split()

N_EMBD, N_LAYER, N_HEAD, N_FF, N_CTX = 64, 2, 4, 128, 4096


def main(out):
    assert len(WORDS) == 101 and len(set(WORDS)) == 101
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    pieces = list("abcdefghijklmnopqrstuvwxyz0123456789") + ["\u2581"]
    for word in WORDS:
        full = "\u2581" + word
        for n in range(2, len(full) + 1):
            if full[:n] not in pieces:
                pieces.append(full[:n])
    # Byte-fallback tokens: any other text (a chat template's brackets,
    # newlines) becomes bytes instead of failing.
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # Longer pieces first: a whole word is one token.
    scores = [0.0] * (3 + 256) + [float(len(p)) for p in pieces]
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("blis-test-tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    rng = np.random.default_rng(20260101)

    def t(name, *shape):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    t("token_embd.weight", n_vocab, N_EMBD)
    ones("output_norm.weight", N_EMBD)
    t("output.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        ones(f"blk.{i}.attn_norm.weight", N_EMBD)
        t(f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_k.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_v.weight", N_EMBD, N_EMBD)
        t(f"blk.{i}.attn_output.weight", N_EMBD, N_EMBD)
        ones(f"blk.{i}.ffn_norm.weight", N_EMBD)
        t(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
