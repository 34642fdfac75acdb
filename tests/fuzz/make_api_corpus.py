#!/usr/bin/env python3
"""Writes the seed inputs of fuzz_api into corpus/api/: a few per entry point, in the byte layout fuzz_api.cpp reads.

    python3 tests/fuzz/make_api_corpus.py

Each seed is a short, mostly valid call — so that the fuzzer starts from inputs that reach the numerics — plus some
that break one rule (a mismatched shape, a negative length, a head count that does not divide the width, a dropout
out of [0, 1], special values). The layout is documented next to each entry point in fuzz_api.cpp; fields are one
byte each, and a missing byte reads as 0. Inputs on which the fuzzer once failed are kept in the same folder as
<entry>_regression_<n> (written by libFuzzer, not by this script, which leaves them in place).
"""
import pathlib

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus" / "api"

ENTRIES = ["masked_softmax", "transpose_qkv", "transpose_output", "linear", "dot_product_attention",
           "additive_attention", "multi_head_attention", "positional_encoding", "rnn", "conv1d", "layer_norm",
           "rms_norm", "position_wise_ffn", "gated_ffn", "transformer_encoder_block", "causal_lm", "embedding", "add_norm"]

# Input::value: bytes 0xF0 + i are special values, any other byte b is int8(b) / 16.
NAN, INF, NEG_INF, BIG, DENORMAL, NEG_ZERO, MAX = 0xF0, 0xF1, 0xF2, 0xF3, 0xF5, 0xF7, 0xF8
# Input::dropout: an index into its table (0 -> 0.0, 2 -> 0.5, 5 -> 1.0, 10 -> -0.5, 12 -> 1.5, 13 -> NaN).
P0, P_HALF, P1, P_NEG, P_OVER, P_NAN = 0, 2, 5, 10, 12, 13
# Input::size_argument: bytes 0xF8 .. 0xFF are -1 .. -8.
MINUS_ONE = 0xF8
# Mask parts (decode_mask's first byte) and rules (the byte after each part).
PER_BATCH, PER_QUERY, CAUSAL, KEEP, KEEP2, PER_BATCH2 = 1, 2, 4, 8, 16, 32
NO_RULE, ZERO, UNIFORM = 0, 1, 2
# The change between a module's two calls: none, an input's shape, a parameter's size, the mask; | TOGGLE: mode.
NONE, INPUT_SHAPE, PARAMETER, NEW_MASK, TOGGLE = 0, 1, 2, 3, 4
# fuzz_paths (DotProductAttention, MultiHeadAttention, after the change): the path byte, then the thread count byte.
# A byte of 3 mod 4 is itself the path, outside the enum (7: AttentionPath(7)). Seeds that end before these bytes
# read automatic and 1 thread.
AUTOMATIC, DIRECT, TILED, BAD_PATH = 0, 1, 2, 7
ONE_THREAD, TWO_THREADS = 0, 1


def tensor_random(scale=1, seed=7):
    """Input::tensor mode 2: uniform in [-s, s) with s = (1e-3, 1, 30, 999)[scale], from a generator seeded by seed."""
    return [2, scale, seed]


def tensor_with_specials(specials, scale=1, seed=7):
    """Mode 3: as mode 2, then the (position, value byte) pairs written."""
    out = [3, scale, seed, len(specials) - 1]
    for position, value in specials:
        out += [position, value - 0xF0]  # special() takes the index mod 16
    return out


def tensor_constant(value):
    return [1, value]


def tensor_values(values):
    """Mode 0: one value byte per entry."""
    return [0] + list(values)


def shape_keep3():
    """Input::size_near three times, keeping the nominal sizes."""
    return [0, 0, 0]


def mask(parts, *fields):
    """decode_mask: the parts byte, then each part's fields and rule, in bit order."""
    return [parts] + [b for field in fields for b in field]


def seeds():
    s = {}
    # masked_softmax: batch, queries, keys; mask; X's shape (size_near x 3); X.
    shape = [0, 0, 0]  # size_near: keep the nominal sizes
    s["masked_softmax_plain"] = [0, 0, 2, 3, 4] + mask(0) + shape + tensor_random()
    s["masked_softmax_lengths"] = [0, 1, 2, 3, 4] + mask(PER_BATCH, [0, 2, 0, NO_RULE]) + shape + tensor_random(2)
    s["masked_softmax_query_lengths"] = ([0, 0, 2, 2, 3] + mask(PER_QUERY, [0, 0, 1, 5, 0, 2, NO_RULE]) + shape +
                                         tensor_random())
    s["masked_softmax_causal_zero"] = [0, 0, 1, 4, 3] + mask(CAUSAL, [ZERO]) + shape + tensor_random(3)
    s["masked_softmax_keep_and_lengths"] = ([0, 1, 2, 3, 5] + mask(PER_BATCH | KEEP, [0, 4, 1, NO_RULE],
                                                                   [1, 0, 0, 1, 9, ZERO]) + shape + tensor_random())
    s["masked_softmax_negative_length"] = [0, 0, 2, 2, 2] + mask(PER_BATCH, [0, 1, 0xFC, NO_RULE]) + shape
    s["masked_softmax_conflicting_rules"] = [0, 0, 1, 2, 2] + mask(CAUSAL | KEEP, [ZERO], [1, 0, 0, 2, 3, UNIFORM])
    s["masked_softmax_wrong_batch"] = [0, 0, 2, 2, 3] + mask(PER_BATCH, [0xF6, 1, 1, 1, NO_RULE]) + shape  # 3 rows
    s["masked_softmax_specials"] = ([0, 0, 1, 2, 4] + mask(0) + shape +
                                    tensor_values([NAN, 0, INF, 16, NEG_INF, NEG_INF, BIG, DENORMAL]))
    s["masked_softmax_empty_keys"] = [0, 1, 2, 3, 0] + mask(PER_BATCH, [0, 0, 0, UNIFORM]) + shape

    # transpose_qkv: num_heads, batch, steps, width; X. transpose_output: num_heads, rows, steps, d; X.
    s["transpose_qkv"] = [1, 0, 4, 2, 3, 8] + tensor_random()
    s["transpose_qkv_not_dividing"] = [1, 1, 3, 2, 2, 8] + tensor_random()
    s["transpose_qkv_zero_heads"] = [1, 0, 0, 1, 1, 4]
    s["transpose_qkv_negative_heads"] = [1, 0, MINUS_ONE, 1, 1, 4]
    s["transpose_output"] = [2, 1, 2, 4, 3, 5] + tensor_with_specials([(3, NEG_ZERO), (9, NAN)])
    s["transpose_output_not_dividing"] = [2, 0, 3, 4, 1, 2]

    # Modules with one input: constructor fields, then mode, batch, steps, X, the change (and its fields).
    s["linear"] = [3, 0, 6, 4, 1] + [0, 2, 3] + tensor_random() + [NONE]
    s["linear_wrong_width"] = [3, 1, 6, 4, 0] + [1, 2, 3] + tensor_random() + [INPUT_SHAPE, 0, 2, 5] + tensor_random()
    s["linear_resized_weight"] = [3, 0, 3, 2, 1] + [0, 1, 1] + tensor_random() + [PARAMETER, 0]
    s["linear_zero_in"] = [3, 0, 0, 4, 1]
    s["linear_empty_batch"] = [3, 1, 5, 5, 1] + [0, 0, 3] + tensor_values([]) + [NONE | TOGGLE]
    s["positional_encoding"] = [7, 0, 8, P0, 6] + [0, 2, 5] + tensor_random(2) + [NONE | TOGGLE]
    s["positional_encoding_dropout"] = [7, 1, 6, P_HALF, 6] + [1, 2, 4] + tensor_random() + [NONE | TOGGLE]
    s["positional_encoding_too_many_steps"] = [7, 0, 4, P0, 3] + [0, 1, 4] + tensor_random()
    s["positional_encoding_odd_width"] = [7, 0, 5, P0, 2] + [0, 1, 2] + tensor_random()
    s["positional_encoding_bad_dropout"] = [7, 0, 4, P_NAN, 3]
    s["rnn"] = [8, 0, 3, 5] + [0, 2, 4] + tensor_random(2) + [NONE]
    s["rnn_specials"] = [8, 1, 2, 3] + [0, 1, 3] + tensor_with_specials([(0, INF), (2, NAN)]) + [INPUT_SHAPE, 0, 1, 0]
    s["conv1d"] = [9, 0, 3, 4, 3, 1] + [0, 2, 6] + tensor_random() + [NONE]
    s["conv1d_even_kernel"] = [9, 1, 2, 2, 4, 0] + [0, 1, 3] + tensor_random() + [PARAMETER | TOGGLE, 1]
    s["conv1d_kernel_longer_than_steps"] = [9, 0, 1, 1, 7, 1] + [0, 1, 2] + tensor_random()
    s["conv1d_zero_kernel"] = [9, 0, 2, 2, 0, 1]
    # The transformer blocks: sizes (and activation, bias); then mode, batch, steps; X; change.
    s["layer_norm"] = [10, 0, 6] + [0, 2, 3] + tensor_random(3) + [NONE | TOGGLE]
    s["layer_norm_resized"] = [10, 1, 5] + [1, 1, 2] + tensor_random() + [PARAMETER, 1]
    s["layer_norm_zero"] = [10, 0, 0]
    s["rms_norm"] = [11, 1, 7] + [0, 2, 2] + tensor_with_specials([(3, BIG)]) + [INPUT_SHAPE, 0, 2, 4]
    s["position_wise_ffn"] = [12, 0, 4, 8, 3, 1] + [1, 2, 3] + tensor_random() + [NONE | TOGGLE]
    s["position_wise_ffn_bad_activation"] = [12, 0, 4, 8, 3, 4]
    s["position_wise_ffn_negative"] = [12, 1, 4, MINUS_ONE, 3, 0]
    s["gated_ffn"] = [13, 1, 5, 7, 3, 1] + [0, 2, 3] + tensor_random() + [PARAMETER | TOGGLE, 2]
    s["gated_ffn_tanh"] = [13, 0, 4, 6, 2, 0] + [0, 1, 4] + tensor_random(2) + [NONE]
    # TransformerEncoderBlock: num_hiddens, ffn, heads, dropout, use_bias, activation, norm_first; then fuzz_layer's.
    s["transformer_encoder_block"] = [14, 0, 8, 12, 2, P0, 1, 0, 0] + [0, 2, 3] + tensor_random() + [NONE | TOGGLE]
    s["transformer_encoder_block_pre_norm"] = ([14, 1, 6, 5, 3, P_HALF, 0, 1, 1] + [1, 1, 4] + tensor_random() +
                                               [PARAMETER, 3])
    s["transformer_encoder_block_indivisible"] = [14, 0, 6, 5, 4, P0, 0, 0, 0]
    # causal_lm: vocab, hiddens, layers, heads, kv heads, head_dim, ffn; flags (1 LayerNorm, 2 plain FFN, 4 attention
    # biases, 8 FFN biases, 16 tied, 32 no rotary); activation; max_positions; window; mode; batch; steps; token + 2.
    LAYER_NORM, PLAIN_FFN, ATTENTION_BIAS, FFN_BIAS, TIED, NO_ROPE = 1, 2, 4, 8, 16, 32
    SILU, GELU_TANH = 3, 2
    gpt2 = LAYER_NORM | PLAIN_FFN | ATTENTION_BIAS | FFN_BIAS | TIED | NO_ROPE
    s["causal_lm_llama"] = [15, 0, 10, 8, 2, 4, 2, 0, 12, 0, SILU, 0, 0, 0, 2, 4] + [2, 5, 9, 11, 3, 4, 7, 2]
    s["causal_lm_llama_training"] = [15, 1, 10, 8, 1, 4, 1, 0, 12, 16, SILU, 0, 0, 1, 1, 4] + [2, 5, 9, 11]
    s["causal_lm_gpt2"] = [15, 1, 9, 8, 2, 2, 0, 0, 12, gpt2, GELU_TANH, 6, 0, 0, 2, 3] + [4, 5, 6, 7, 8, 9]
    s["causal_lm_mistral_window"] = [15, 0, 7, 8, 2, 4, 2, 0, 10, 0, SILU, 0, 2, 0, 1, 4] + [3, 4, 5, 6]
    s["causal_lm_head_dim"] = [15, 0, 7, 6, 1, 2, 1, 4, 10, 0, SILU, 0, 0, 0, 1, 3] + [3, 4, 5]
    s["causal_lm_no_layers"] = [15, 0, 7, 6, 0, 2, 1, 0, 10, 0, SILU, 0, 0, 0, 2, 2] + [3, 4, 5, 6]
    s["causal_lm_odd_rotary"] = [15, 0, 7, 6, 1, 2, 1, 3, 10, 0, SILU, 0, 0, 0, 1, 3] + [3, 4, 5]
    s["causal_lm_plain_ffn_without_bias"] = [15, 0, 7, 6, 1, 2, 1, 0, 10, PLAIN_FFN, SILU]
    s["causal_lm_token_out_of_range"] = [15, 0, 7, 6, 1, 2, 1, 0, 10, 0, SILU, 0, 0, 0, 1, 3] + [3, 0, 20]
    s["causal_lm_past_positions"] = [15, 0, 7, 6, 1, 2, 1, 0, 10, gpt2, GELU_TANH, 2, 0, 0, 1, 4] + [3, 4, 5, 6]
    # embedding: num_embeddings, embedding_dim, mode, batch, steps, token + 2.
    s["embedding"] = [16, 0, 9, 5, 1, 2, 3] + [2, 4, 10, 3, 2, 7]
    s["embedding_double"] = [16, 1, 4, 3, 0, 1, 4] + [2, 3, 4, 5]
    s["embedding_out_of_range"] = [16, 0, 4, 3, 0, 1, 2] + [2, 6]
    s["embedding_negative"] = [16, 0, 4, 3, 0, 1, 1] + [0]
    s["embedding_zero_rows"] = [16, 0, MINUS_ONE, 3]
    # add_norm: normalized_shape, dropout, mode, batch, steps, X, Y's shape (size_near x 3), Y.
    s["add_norm"] = [17, 0, 8, P0, 0, 2, 3] + tensor_random() + shape_keep3() + tensor_random(1, 8)
    s["add_norm_dropout"] = [17, 1, 6, P_HALF, 1, 2, 2] + tensor_random() + shape_keep3() + tensor_random(2, 9)
    s["add_norm_mismatch"] = [17, 0, 5, P0, 0, 1, 2] + tensor_random() + [0, 0, 0xF3] + tensor_random()
    s["add_norm_bad_dropout"] = [17, 0, 5, P_OVER]
    s["add_norm_specials"] = ([17, 0, 4, P0, 0, 1, 1] + tensor_with_specials([(0, NAN), (1, INF)]) + shape_keep3() +
                              tensor_random())

    # DotProductAttention: dropout; then mode, batch, queries, keys, key width, value width; mask; Q, K, V; change.
    s["dot_product_attention"] = ([4, 0, P0, 0, 2, 3, 4, 4, 2] + mask(PER_BATCH, [0, 2, 3, NO_RULE]) +
                                  tensor_random() * 3 + [NONE | TOGGLE])
    s["dot_product_attention_training"] = ([4, 1, P_HALF, 1, 2, 3, 4, 4, 2] + mask(CAUSAL, [NO_RULE]) +
                                           tensor_random() * 3 + [TOGGLE])
    s["dot_product_attention_per_query"] = ([4, 0, P0, 0, 1, 2, 3, 2, 2] + mask(PER_QUERY, [0, 0, 0, 3, NO_RULE]) +
                                            tensor_random(3) * 3 + [NEW_MASK, 1, 2, 3, PER_BATCH, 0, 5, ZERO])
    s["dot_product_attention_causal_keep"] = ([4, 1, P0, 0, 2, 3, 3, 4, 2] +
                                            mask(KEEP | CAUSAL, [UNIFORM], [1, 0, 0, 1, 5, NO_RULE]) +
                                            tensor_random() * 3 + [NONE])
    s["dot_product_attention_mismatch"] = ([4, 0, P0, 0, 2, 3, 4, 4, 2] + mask(0) + tensor_random() * 3 +
                                           [INPUT_SHAPE, 1, 2, 3] + tensor_random())
    s["dot_product_attention_bad_dropout"] = [4, 0, P_OVER]
    s["dot_product_attention_zero_width"] = [4, 0, P0, 0, 1, 2, 2, 0, 3] + mask(0)
    s["dot_product_attention_no_keys"] = [4, 1, P0, 0, 2, 3, 0, 4, 2] + mask(0) + tensor_random() * 3
    # ... then the path and the thread count.
    s["dot_product_attention_tiled"] = s["dot_product_attention"] + [TILED, TWO_THREADS]
    s["dot_product_attention_direct_two_threads"] = s["dot_product_attention"] + [DIRECT, TWO_THREADS]
    # Still in training mode (no TOGGLE) with dropout 0.5: the calls take the direct path whatever is set.
    s["dot_product_attention_training_tiled"] = s["dot_product_attention_training"][:-1] + [NONE, TILED, ONE_THREAD]
    s["dot_product_attention_causal_keep_tiled"] = s["dot_product_attention_causal_keep"] + [TILED, TWO_THREADS]
    s["dot_product_attention_per_query_tiled"] = s["dot_product_attention_per_query"] + [TILED, ONE_THREAD]
    s["dot_product_attention_mismatch_tiled"] = s["dot_product_attention_mismatch"] + [TILED, ONE_THREAD]
    s["dot_product_attention_no_keys_tiled"] = s["dot_product_attention_no_keys"] + [NONE, TILED, TWO_THREADS]
    s["dot_product_attention_bad_path"] = s["dot_product_attention"] + [BAD_PATH, TWO_THREADS]

    # AdditiveAttention: key_size, query_size, num_hiddens, dropout; mode, batch, queries, keys, value width; ...
    s["additive_attention"] = ([5, 0, 3, 2, 4, P0, 0, 2, 3, 4, 2] + mask(PER_BATCH, [0, 4, 1, NO_RULE]) +
                               tensor_random() * 3 + [NONE | TOGGLE])
    s["additive_attention_training"] = ([5, 1, 2, 2, 3, P_HALF, 1, 1, 2, 3, 3] +
                                        mask(CAUSAL | KEEP2, [ZERO], [1, 0, 0, 2, 3, NO_RULE]) +
                                        tensor_random() * 3 + [PARAMETER, 2])
    s["additive_attention_wrong_key_size"] = ([5, 0, 3, 2, 4, P0, 0, 1, 2, 2, 1] + mask(0) + tensor_random() * 3 +
                                              [INPUT_SHAPE, 1, 2, 5] + tensor_random())
    s["additive_attention_zero_hiddens"] = [5, 0, 3, 2, 0, P0]
    s["additive_attention_bad_dropout"] = [5, 1, 3, 2, 4, P_NEG]

    # MultiHeadAttention: num_heads, free width (flag), then num_hiddens or its multiple of num_heads, key_size,
    # query_size, value_size, dropout, bias; mode, batch, queries, keys; mask; Q, K, V; change.
    s["multi_head_attention"] = ([6, 0, 2, 0, 1, 4, 4, 4, P0, 0] + [0, 2, 3, 3] +
                                 mask(PER_BATCH, [0, 3, 2, NO_RULE]) + tensor_random() * 3 + [NONE | TOGGLE])
    s["multi_head_attention_training_bias"] = ([6, 1, 4, 0, 0, 3, 5, 2, P_HALF, 1] + [1, 2, 4, 4] +
                                               mask(CAUSAL, [NO_RULE]) + tensor_random() * 3 + [TOGGLE])
    s["multi_head_attention_free_width"] = ([6, 0, 3, 1, 9, 2, 2, 2, P0, 0] + [0, 1, 2, 2] + mask(0) +
                                            tensor_random() * 3)
    s["multi_head_attention_not_dividing"] = [6, 0, 3, 1, 10, 4, 4, 4, P0, 0]
    s["multi_head_attention_zero_heads"] = [6, 0, 0, 1, 8, 4, 4, 4, P0, 0]
    s["multi_head_attention_negative_heads"] = [6, 1, MINUS_ONE, 1, 8, 4, 4, 4, P0, 0]
    s["multi_head_attention_per_query_zero"] = ([6, 1, 2, 0, 0, 3, 3, 3, P0, 1] + [0, 1, 2, 3] +
                                                mask(PER_QUERY | KEEP, [0, 0, 0, 3, ZERO], [1, 0, 0, 2, 4, NO_RULE]) +
                                                tensor_random(2) * 3 + [PARAMETER, 6])
    s["multi_head_attention_new_mask"] = ([6, 0, 2, 0, 1, 4, 4, 4, P0, 0] + [0, 2, 3, 3] + mask(0) +
                                          tensor_random() * 3 + [NEW_MASK, 3, 3, 3, PER_BATCH, 0, 1, 2, 3, NO_RULE])
    s["multi_head_attention_specials"] = ([6, 0, 1, 0, 0, 2, 2, 2, P0, 0] + [0, 1, 2, 2] + mask(0) +
                                          tensor_with_specials([(0, NAN), (1, INF)]) + tensor_random() * 2)
    # ... then the path and the thread count.
    s["multi_head_attention_tiled"] = s["multi_head_attention"] + [TILED, TWO_THREADS]
    s["multi_head_attention_direct"] = s["multi_head_attention"] + [DIRECT, ONE_THREAD]
    s["multi_head_attention_training_tiled"] = (s["multi_head_attention_training_bias"][:-1] +
                                                [NONE, TILED, TWO_THREADS])  # training mode, dropout 0.5
    s["multi_head_attention_new_mask_tiled"] = s["multi_head_attention_new_mask"] + [TILED, TWO_THREADS]
    s["multi_head_attention_resized_tiled"] = s["multi_head_attention_per_query_zero"] + [TILED, ONE_THREAD]
    s["multi_head_attention_specials_tiled"] = s["multi_head_attention_specials"] + [NONE, TILED, TWO_THREADS]
    s["multi_head_attention_bad_path"] = s["multi_head_attention_free_width"] + [NONE, BAD_PATH, ONE_THREAD]
    return s


def main():
    CORPUS.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        assert all(0 <= b <= 255 for b in data), name
        assert ENTRIES[data[0]] in name, name
        (CORPUS / name).write_bytes(bytes(data))
    print(f"wrote {len(seeds())} seeds to {CORPUS}")


if __name__ == "__main__":
    main()
