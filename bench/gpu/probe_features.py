"""Which PyTorch features work under the allocator the environment chose (one line of JSON each).

    python bench/gpu/probe_features.py            # run under LD_PRELOAD=libgmlake.so and/or PYTORCH_CUDA_ALLOC_CONF

Each probe runs in a subprocess with a timeout, so that a hang is reported as one ("hung"), not
suffered: torch.multiprocessing (a CUDA tensor to a spawned child and back), storage._share_cuda_,
torch.compile(mode="reduce-overhead") training a small MLP, a manual CUDA graph, memory history
snapshots.  Prints {"probe":..., "result": "ok"|"error"|"hung", "seconds":..., "detail":...}.
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
