"""Which PyTorch features work under the allocator the environment chose (one line of JSON each).

    python bench/gpu/probe_features.py            # run under LD_PRELOAD=libgmlake.so and/or PYTORCH_CUDA_ALLOC_CONF

Each probe runs in a subprocess with a timeout, so that a hang is reported as one ("hung"), not
suffered: torch.multiprocessing (a CUDA tensor to a spawned child and back), storage._share_cuda_,
torch.compile(mode="reduce-overhead") training a small MLP, a manual CUDA graph, memory history
snapshots; and what other programs do with PyTorch's allocator (MemPool, a memory fraction, the
statistics and summary, recovery after an out-of-memory error, cuDNN's benchmark mode, compile's
default mode, a DataLoader with pinned memory in worker processes, caching_allocator_alloc, graphs
sharing a pool, record_stream, threads on streams of their own, empty_cache seen by mem_get_info,
attention in bf16, NCCL with a world of one, transformers' generate).  Prints {"probe":..., "result": "ok"|"error"|"hung", "seconds":..., "detail":...}.
"""
import json, os, subprocess, sys, tempfile, textwrap, time

PROBES = {
    "multiprocessing": """
        import torch, torch.multiprocessing as mp
        def child(q_in, q_out):
            t = q_in.get(); t.add_(1); torch.cuda.synchronize(); q_out.put(t.sum().item())
        if __name__ == "__main__":
            ctx = mp.get_context("spawn"); a, b = ctx.Queue(), ctx.Queue()
            p = ctx.Process(target=child, args=(a, b)); p.start()
            t = torch.ones(1000, device="cuda"); a.put(t)
            s = b.get(timeout=40); p.join(10)
            assert s == 2000.0 and float(t.sum()) == 2000.0, (s, float(t.sum()))
            print("ok", s)
    """,
    "share_cuda": """
        import torch
        t = torch.ones(1 << 20, device="cuda")
        r = t.untyped_storage()._share_cuda_()
        print("ok", type(r), len(r))
    """,
    "compile_reduce_overhead": """
        import torch
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        f = torch.compile(m, mode="reduce-overhead")
        x = torch.randn(64, 256, device="cuda"); y = torch.randint(0, 10, (64,), device="cuda")
        for i in range(8):
            loss = torch.nn.functional.cross_entropy(f(x), y); opt.zero_grad(); loss.backward(); opt.step()
        torch.cuda.synchronize(); print("ok", float(loss))
    """,
    "cuda_graph": """
        import torch
        x = torch.randn(1024, 1024, device="cuda"); s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3): y = x @ x
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g): y = x @ x
        g.replay(); torch.cuda.synchronize()
        assert torch.allclose(y, x @ x); print("ok")
    """,
    "memory_history": """
        import torch
        torch.cuda.memory._record_memory_history(max_entries=1000)
        a = torch.randn(1 << 20, device="cuda"); del a
        s = torch.cuda.memory._snapshot(); print("ok", len(s.get("device_traces", [[]])[0]))
    """,
}

# What other programs do with PyTorch's allocator (session 24): each asserts its own result.
PROBES.update({
    "mem_pool": """
        import torch
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            a = torch.full((1 << 20,), 3.0, device="cuda")
        b = torch.full((1 << 20,), 4.0, device="cuda")
        assert float((a + b).sum()) == 7.0 * (1 << 20)
        print("ok", pool.id)
    """,
    "memory_fraction": """
        import torch
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(0.02)
        small = torch.empty(int(total * 0.005), dtype=torch.uint8, device="cuda")
        try:
            big = torch.empty(int(total * 0.05), dtype=torch.uint8, device="cuda")
            raise SystemExit("allocated %d bytes above a fraction of 0.02" % big.numel())
        except torch.OutOfMemoryError as e:
            print("ok refused:", str(e).splitlines()[0][:160])
    """,
    "stats_and_summary": """
        import torch
        torch.cuda.reset_peak_memory_stats()
        a = torch.empty(64 << 20, dtype=torch.uint8, device="cuda"); del a
        ms = torch.cuda.memory_stats()
        peak = torch.cuda.max_memory_allocated()
        assert peak >= 64 << 20, peak
        assert torch.cuda.max_memory_reserved() >= peak
        s = torch.cuda.memory_summary()
        assert len(s) > 100
        print("ok", peak >> 20, "MiB peak;", len(ms), "keys;", "num_alloc_retries" in ms)
    """,
    "oom_recover": """
        import torch
        total = torch.cuda.get_device_properties(0).total_memory
        try:
            torch.empty(total * 2, dtype=torch.uint8, device="cuda")
            raise SystemExit("no OOM")
        except torch.OutOfMemoryError as e:
            msg = str(e).splitlines()[0][:200]
        x = torch.randn(4096, 4096, device="cuda"); y = x @ x
        assert torch.isfinite(y).all()
        print("ok", msg)
    """,
    "cudnn_benchmark": """
        import sys
        sys.path.insert(0, %r)
        import cudnn_bench
        losses, secs = cudnn_bench.train()
        print("ok", losses[-1], round(secs, 2))
    """ % os.path.dirname(os.path.abspath(__file__)),
    "compile_default": """
        import torch
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)).cuda()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        f = torch.compile(m)
        for i in range(6):
            x = torch.randn(64 + 16 * i, 256, device="cuda"); y = torch.randint(0, 10, (64 + 16 * i,), device="cuda")
            loss = torch.nn.functional.cross_entropy(f(x), y); opt.zero_grad(); loss.backward(); opt.step()
        torch.cuda.synchronize(); assert torch.isfinite(loss); print("ok", float(loss))
    """,
    "dataloader_pin": """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        if __name__ == "__main__":
            torch.cuda.init()
            ds = TensorDataset(torch.arange(4096, dtype=torch.float32).reshape(512, 8))
            tot = torch.zeros((), device="cuda")
            for (b,) in DataLoader(ds, batch_size=64, num_workers=2, pin_memory=True):
                tot += b.cuda(non_blocking=True).sum()
            assert float(tot) == 4095 * 4096 / 2, float(tot)
            print("ok", float(tot))
    """,
    "caching_allocator_alloc": """
        import torch
        p = torch.cuda.caching_allocator_alloc(1 << 20)
        assert p != 0
        torch.cuda.caching_allocator_delete(p)
        print("ok", hex(p))
    """,
    "graph_pool_share": """
        import torch
        x = torch.randn(512, 512, device="cuda"); s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3): y = x @ x; z = y.relu()
        torch.cuda.current_stream().wait_stream(s)
        pool = torch.cuda.graph_pool_handle()
        g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1, pool=pool): y = x @ x
        with torch.cuda.graph(g2, pool=pool): z = y.relu() * 2
        x.copy_(torch.randn_like(x)); g1.replay(); g2.replay(); torch.cuda.synchronize()
        assert torch.allclose(z, (x @ x).relu() * 2, atol=1e-3); print("ok")
    """,
    "record_stream": """
        import torch
        s = torch.cuda.Stream(); bad = 0
        for i in range(200):
            with torch.cuda.stream(s):
                t = torch.full((1 << 18,), float(i), device="cuda"); u = t * 2
            t.record_stream(torch.cuda.current_stream()); torch.cuda.current_stream().wait_stream(s)
            v = u + t; del t
            w = torch.full((1 << 18,), -1.0, device="cuda")
            bad += int(float(v[0]) != 3.0 * i)
        torch.cuda.synchronize(); assert bad == 0, bad; print("ok")
    """,
    "threads": """
        import torch, threading
        errs = []
        def work(k):
            try:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for i in range(300):
                        n = 1 << (10 + (i * 7 + k) % 12)
                        a = torch.full((n,), float(k), device="cuda"); b = a * 3
                        if float(b[-1]) != 3.0 * k: errs.append((k, i))
            except Exception as e: errs.append(repr(e))
        ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        [t.start() for t in ts]; [t.join() for t in ts]
        assert not errs, errs[:3]; print("ok")
    """,
    "empty_cache_frees": """
        import torch
        torch.cuda.synchronize(); f0, _ = torch.cuda.mem_get_info()
        a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); a.fill_(1); torch.cuda.synchronize()
        f1, _ = torch.cuda.mem_get_info(); del a; torch.cuda.empty_cache(); torch.cuda.synchronize()
        f2, _ = torch.cuda.mem_get_info()
        assert f0 - f1 >= (2 << 30) - (64 << 20), (f0, f1)
        assert f2 - f1 >= (2 << 30) - (64 << 20), (f1, f2)
        print("ok", (f0 - f1) >> 20, (f2 - f1) >> 20)
    """,
    "sdpa_bf16": """
        import torch, torch.nn.functional as F
        q = torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True); o.sum().backward()
        torch.cuda.synchronize(); assert torch.isfinite(q.grad).all(); print("ok")
    """,
    "nccl_world_of_one": """
        import os, torch, torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
        t = torch.ones(1 << 20, device="cuda"); dist.all_reduce(t); dist.barrier()
        assert float(t.sum()) == 1 << 20; dist.destroy_process_group(); print("ok")
    """,
    "hf_generate": """
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                          num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024)
        m = LlamaForCausalLM(cfg).cuda().to(torch.bfloat16).eval()
        ids = torch.randint(0, 4096, (4, 64), device="cuda")
        out = m.generate(ids, max_new_tokens=64, do_sample=False)
        assert out.shape == (4, 128), out.shape; print("ok", out[0, -4:].tolist())
    """,
})

# reduce-overhead with inductor's older CUDA-graph path (no cudagraph trees)
PROBES["compile_reduce_overhead_no_trees"] = PROBES["compile_reduce_overhead"].replace(
    "import torch\n", "import torch, torch._inductor.config as ic\n        ic.triton.cudagraph_trees = False\n", 1)


def main():
    which = sys.argv[1:] or list(PROBES)
    for name in which:
        t0 = time.time()
        try:
            # a file, not -c: a spawned child imports the parent's __main__ by its path
            with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
                f.write(textwrap.dedent(PROBES[name]))
            r = subprocess.run([sys.executable, f.name], capture_output=True,
                               text=True, timeout=float(os.environ.get("PROBE_TIMEOUT", "90")))
            res = "ok" if r.returncode == 0 else "error"
            detail = (r.stdout + r.stderr).strip().splitlines()[-int(os.environ.get("PROBE_LINES", "3")):]
        except subprocess.TimeoutExpired:
            res, detail = "hung", []
        os.unlink(f.name)
        print(json.dumps({"probe": name, "result": res, "seconds": round(time.time() - t0, 1),
                          "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                          "preload": "gmlake" in os.environ.get("LD_PRELOAD", ""), "detail": detail}), flush=True)

if __name__ == "__main__":
    main()
