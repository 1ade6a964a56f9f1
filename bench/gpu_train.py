"""GPU workload benchmark: training with transformers (random weights, bf16 autocast, AdamW,
activation checkpointing, sequence length varying per step) under one allocator setting.
MODEL=gpt2 (default): GPT-2 24 x 1024, full fine-tuning.  MODEL=llama_lora: LLaMA-style
16 x 2048 with bf16 weights and LoRA r=16 on q/k/v/o (peft), batch 4.
Prints one JSON line: allocator, peak allocated / reserved bytes, utilization, seconds per
iteration (median of the timed iterations).  Run it through bench/gpu_bench.sh, which starts one
process per allocator."""
import json, os, statistics, sys, time
import torch

name = sys.argv[1]
torch.manual_seed(0)
if os.environ.get("MODEL", "gpt2") == "llama_lora":
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5504, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).cuda()
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    batch, vocab = 4, 32000
    lengths = [256, 2048, 1024, 1536, 512, 1792, 768, 1280]
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).cuda()
    model.gradient_checkpointing_enable()
    batch, vocab = 8, 50257
    lengths = [128, 1024, 512, 768, 256, 896, 384, 640]
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
times = []
steps = int(os.environ.get("STEPS", "17"))
for step in range(steps):
    seq = lengths[step % len(lengths)]
    x = torch.randint(0, vocab, (batch, seq), device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if step >= 2:
        times.append(time.perf_counter() - t0)
alloc, res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
print(json.dumps({"allocator": name, "peak_allocated": alloc, "peak_reserved": res,
                  "utilization": alloc / res if res else 0, "s_per_iter": statistics.median(times),
                  "loss": float(loss.detach()), "model": os.environ.get("MODEL", "gpt2")}))
