#!/usr/bin/env python3
"""The PyTorch baseline for echo's training-step benchmark, and the Hugging Face load check.

Throughput (the default): the Qwen3 model of an echo YAML config built with
transformers.Qwen3ForCausalLM, fp32 master weights under bf16 autocast (echo's CUDA precision
policy), PyTorch's SDPA attention, AdamW (fused) -- one training step on random tokens, timed
with CUDA events after warm-ups, in the same units echo_model_bench prints (tokens/s), plus
MFU against --peak-tflops (H200 dense bf16: 989).

    python3 scripts/torch_reference.py configs/qwen3-0.6b-bf16.yaml --batch 4 --seq 2048 --json out.json

Hugging Face check (--hf-checkpoint DIR): loads an echo checkpoint folder with
Qwen3ForCausalLM.from_pretrained (fails on missing or unexpected tensors) and prints the mean
cross-entropy of --tokens, the int32 .npy of shape (2, batch, seq) that `echo_eval --dump-batch`
writes ([0] input ids, [1] targets, -100 ignored), to compare with echo_eval's loss on them.

Runs where PyTorch and transformers are installed (the GPU machine); echo itself never imports
it. Only standard library + torch + transformers + pyyaml + numpy.
"""
import argparse
import json
import sys


def load_model_config(path):
    import yaml

    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    m = cfg.get("model", {})
    need = ["vocab_size", "hidden", "ffn", "layers", "heads", "kv_heads", "head_dim"]
    missing = [k for k in need if k not in m]
    if missing:
        sys.exit(f"{path}: model section lacks {', '.join(missing)}")
    return m


def build_model(m, device):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=int(m["vocab_size"]),
        hidden_size=int(m["hidden"]),
        intermediate_size=int(m["ffn"]),
        num_hidden_layers=int(m["layers"]),
        num_attention_heads=int(m["heads"]),
        num_key_value_heads=int(m["kv_heads"]),
        head_dim=int(m["head_dim"]),
        rope_theta=float(m.get("rope_base", 1000000.0)),
        rms_norm_eps=float(m.get("norm_eps", 1e-6)),
        tie_word_embeddings=bool(m.get("tie_embeddings", True)),
        max_position_embeddings=int(m.get("max_position_embeddings", 40960)),
        attn_implementation="sdpa",
    )
    model = Qwen3ForCausalLM(config).to(device=device, dtype=torch.float32)
    return model


def throughput(args):
    import torch

    m = load_model_config(args.config)
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    model = build_model(m, device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1, fused=True)
    vocab = int(m["vocab_size"])
    tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), device=device)
    x, y = tokens[:, :-1], tokens[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    ms = times[len(times) // 2]
    ntok = args.batch * args.seq
    layers, heads, hd = int(m["layers"]), int(m["heads"]), int(m["head_dim"])
    # 6 N per token for the weights, plus causal attention: 6 * layers * heads * hd * seq per token.
    flop = 6.0 * params * ntok + 6.0 * layers * heads * hd * args.seq * ntok
    result = {
        "impl": "pytorch " + torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "params": params,
        "batch": args.batch,
        "seq": args.seq,
        "median_ms": ms,
        "tokens_per_s": ntok / (ms * 1e-3),
        "mfu": flop / (ms * 1e-3) / (args.peak_tflops * 1e12),
        "peak_tflops": args.peak_tflops,
    }
    print(
        f"torch_reference: {result['gpu']} params={params} batch={args.batch} seq={args.seq}  "
        f"step median {ms:.1f} ms  {result['tokens_per_s']:.0f} tokens/s  MFU {100 * result['mfu']:.1f}%"
    )
    return result


def hf_check(args):
    import numpy as np
    import torch
    from transformers import Qwen3ForCausalLM

    model, info = Qwen3ForCausalLM.from_pretrained(args.hf_checkpoint, output_loading_info=True, torch_dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        sys.exit(f"{args.hf_checkpoint}: {bad}")
    result = {"checkpoint": args.hf_checkpoint, "loaded": True}
    if args.tokens:
        batch = torch.from_numpy(np.load(args.tokens).astype("int64"))
        if batch.ndim != 3 or batch.shape[0] != 2:
            sys.exit(f"{args.tokens}: expected (2, batch, seq) from echo_eval --dump-batch, got {tuple(batch.shape)}")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = model.to(device).eval()
        ids, targets = batch[0].to(device), batch[1].to(device)
        with torch.no_grad():
            logits = model(input_ids=ids).logits.double()
        # NOTE: fp32 weights and activations; the loss in double, over the targets echo counts.
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
        )
        result["loss"] = float(loss)
        print(f"hf_check: {args.hf_checkpoint} loads; loss on {args.tokens} = {float(loss):.6f}")
    else:
        print(f"hf_check: {args.hf_checkpoint} loads with no missing or unexpected tensors")
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", nargs="?", help="echo YAML config (its model section) for the throughput run")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak of the GPU (H200: 989)")
    p.add_argument("--hf-checkpoint", help="check that this echo checkpoint folder loads in transformers")
    p.add_argument("--tokens", help="echo_eval --dump-batch's .npy (2, batch, seq): the --hf-checkpoint loss input")
    p.add_argument("--json", help="write the result as JSON here")
    args = p.parse_args()
    for name in ("batch", "seq", "iters"):
        if getattr(args, name) < 1:
            sys.exit(f"--{name} must be at least 1 (got {getattr(args, name)})")
    if not args.config and not args.hf_checkpoint:
        p.error("give a config (throughput) or --hf-checkpoint")
    result = hf_check(args) if args.hf_checkpoint else throughput(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
