"""Decode speed of examples/generate against CTranslate2 and transformers' generate(), side by side in one run.

    python3 bench/generate_peers.py [--rounds 5] [--threads 1 2] [--model /tmp/llama-100m]

Makes (once) examples/generate/make_model.py's 100 M-parameter Llama with random weights in float32, converts it to
CTranslate2 (float32), and then, for each thread count, alternates the three engines for --rounds rounds: batch 1, a
prompt of 32 tokens, 64 new tokens, greedy. Decode time per token: transformers and CTranslate2 are timed for 1 and 64
new tokens, (T64 - T1) / 63; attend's examples/generate prints its own decode rate (the same prompt and count).
Prints the medians and the ratios. Needs pip's torch, transformers, tokenizers and ctranslate2, and a built
build/examples/generate.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import ctranslate2
import torch
import transformers
from tokenizers import Tokenizer, models
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "generate"))
import make_model  # noqa: E402

PROMPT = [(7 * i + 3) % 32000 for i in range(32)]
NEW = 64


def prepare(model_dir):
    if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
        torch.manual_seed(0)
        model = make_model.CONFIGS["llama"]().to(torch.float32)
        model.save_pretrained(model_dir, safe_serialization=True)
    if not os.path.exists(os.path.join(model_dir, "tokenizer.json")):
        # CTranslate2's converter takes the vocabulary from a tokenizer: token i is the word "t<i>".
        vocab = {"t%d" % i: i for i in range(32000)}
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                            unk_token="t0", bos_token="t1", eos_token="t2")
        tokenizer.save_pretrained(model_dir)
    ct2_dir = model_dir + "-ct2"
    if not os.path.exists(os.path.join(ct2_dir, "model.bin")):
        ctranslate2.converters.TransformersConverter(model_dir).convert(ct2_dir, quantization="float32", force=True)
    return ct2_dir


def time_transformers(model, new_tokens):
    ids = torch.tensor([PROMPT])
    start = time.perf_counter()
    with torch.no_grad():
        model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                       attention_mask=torch.ones_like(ids), pad_token_id=0)
    return time.perf_counter() - start


def time_ct2(generator, new_tokens):
    tokens = ["t%d" % t for t in PROMPT]
    start = time.perf_counter()
    generator.generate_batch([tokens], max_length=new_tokens, min_length=new_tokens, sampling_topk=1,
                             include_prompt_in_result=False)
    return time.perf_counter() - start


def attend_decode_seconds(binary, model_dir, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([binary, "/tmp", model_dir], env=env, check=True, capture_output=True, text=True).stdout
    rate = float(re.search(r"decode 64 tokens: ([0-9.]+) tokens/s", out).group(1))
    return 1.0 / rate


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--model", default="/tmp/llama-100m")
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "examples", "generate"))
    args = parser.parse_args()
    ct2_dir = prepare(args.model)
    hf = LlamaForCausalLM.from_pretrained(args.model, torch_dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    print("torch %s, transformers %s, ctranslate2 %s; model %s (%.1f M parameters), float32, batch 1, prompt 32, "
          "%d new tokens, greedy" % (torch.__version__, transformers.__version__, ctranslate2.__version__, args.model,
                                     sum(p.numel() for p in hf.parameters()) / 1e6, NEW))
    for threads in args.threads:
        torch.set_num_threads(threads)
        generator = ctranslate2.Generator(ct2_dir, device="cpu", compute_type="float32", intra_threads=threads)
        per_token = {"attend": [], "ctranslate2": [], "transformers": []}
        for _ in range(args.rounds):
            per_token["attend"].append(attend_decode_seconds(args.binary, args.model, threads))
            per_token["ctranslate2"].append((time_ct2(generator, NEW) - time_ct2(generator, 1)) / (NEW - 1))
            per_token["transformers"].append((time_transformers(hf, NEW) - time_transformers(hf, 1)) / (NEW - 1))
        medians = {k: statistics.median(v) for k, v in per_token.items()}
        print("\n%d thread(s): decode ms per token (median of %d)" % (threads, args.rounds))
        for name, seconds in medians.items():
            print("  %-13s %7.2f ms  (%.1f tokens/s)" % (name, 1e3 * seconds, 1 / seconds))
        print("  attend is %.2fx CTranslate2's speed, %.2fx transformers'" % (
            medians["ctranslate2"] / medians["attend"], medians["transformers"] / medians["attend"]))


if __name__ == "__main__":
    main()
