"""PyTorch features a user relies on, one per run, for tests/gpu/test_torch_features.py (issue 20):

    python3 tests/gpu/torch_features.py mp|mp_back|mp_foreign|compile|graph|snapshot|cudnn|mem_pool

Each prints, as its last line, `RESULT {"status": "ok"|"failed"|"hung", "detail": ...}` and exits
0 (ok), 1 (failed) or 3 (hung: a wait of its own ran out).  The test runs it under
LD_PRELOAD=libgmlake.so with nothing else set (gmlake's default route) and a hard timeout.
  mp        a CUDA tensor sent to a `spawn`ed child through a torch.multiprocessing Queue; the
            child adds 1 in place and sends back a CUDA tensor of its own (x * 2); the parent
            checks both (waits at most MP_WAIT seconds, default 60, for the reply); a view at an
            offset and a Parameter travel too
  mp_back   a CUDA tensor received by a spawned child and sent back as a view: the parent's own
            memory comes back (same address), the child's write and the parent's seen
  mp_foreign  a CUDA tensor over cudaMallocManaged memory (not gmlake's) put on such a Queue: under
            gmlake's default it cannot be shared; reports hung if no error ends the program
  compile   a small MLP trained STEPS (10) steps eagerly, then again from the same weights under
            torch.compile(mode="reduce-overhead") (CUDA graphs): losses finite, decreasing,
            within 1% of the eager ones, no CUDA graph skipped
  graph     forward + backward of a small MLP captured with torch.cuda.graph, replayed on three new
            inputs; loss and gradients equal to eager ones
  snapshot  torch.cuda.memory._record_memory_history, some allocations, _snapshot(): the snapshot
            has segments and allocation events
  cudnn     a small convolutional net trained 4 steps of 3 batch shapes under
            torch.backends.cudnn.benchmark (PyTorch probes the largest workspace it can get before
            each new convolution: about the device's free memory, then half, ...); losses finite
  mem_pool  a tensor made inside torch.cuda.use_mem_pool(torch.cuda.MemPool()) beside one outside
"""
import json, math, os, queue, sys, time, traceback

import torch


def result(status, detail, **extra):
    print("RESULT " + json.dumps(dict(status=status, detail=detail, **extra)), flush=True)
    sys.exit({"ok": 0, "failed": 1, "hung": 3}[status])


def _mp_child(q_in, q_out, q_ack):
    x, view, param = q_in.get()
    view_ok = bool(torch.equal(view.cpu(), torch.arange(4096, 8192, dtype=torch.float32)))
    param_ok = isinstance(param, torch.nn.Parameter) and param.requires_grad
    x += 1  # in place: the parent's memory
    y = x * 2  # the child's own CUDA tensor, sent back
    torch.cuda.synchronize()
    q_out.put((y, view_ok, param_ok))
    q_ack.get(timeout=120)  # y must stay alive until the parent has read it


def mp():
    wait = float(os.environ.get("MP_WAIT", "60"))
    ctx = torch.multiprocessing.get_context("spawn")
    q_in, q_out, q_ack = ctx.Queue(), ctx.Queue(), ctx.Queue()
    for q in (q_in, q_out, q_ack):
        q.cancel_join_thread()  # exiting never waits on a queue's feeder thread
    p = ctx.Process(target=_mp_child, args=(q_in, q_out, q_ack), daemon=True)
    p.start()
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    param = torch.nn.Parameter(torch.ones(300, device="cuda"))
    q_in.put((t, t[4096:8192], param))  # pickled in the queue's feeder thread: an error there is printed, not raised
    t0 = time.monotonic()
    y = None
    while y is None:
        try:
            y, view_ok, param_ok = q_out.get(timeout=1)
        except queue.Empty:
            if not p.is_alive():
                result("failed", f"the spawned child exited with code {p.exitcode} without replying "
                       "(its error is above)")
            if time.monotonic() - t0 > wait:
                p.kill()
                result("hung", f"no reply from the spawned child within {wait:.0f} s (it still "
                       "waited for the tensor: sending it failed in the parent's queue thread?)")
    torch.cuda.synchronize()
    want = torch.arange(1 << 20, dtype=torch.float32) + 1
    in_place = torch.equal(t.cpu(), want)
    back = torch.equal(y.cpu(), want * 2)
    del y
    q_ack.put(1)
    p.join(30)
    if not (in_place and back and view_ok and param_ok):
        result("failed", f"wrong values: child's in-place add seen {in_place}, tensor sent back right "
               f"{back}, view right in the child {view_ok}, parameter kept {param_ok}")
    result("ok", "tensor shared with a spawned child and back; values right", child_exit=p.exitcode)


def _mp_back_child(q_in, q_out, q_ack):
    x = q_in.get()
    x[100:200] += 1  # in the parent's memory
    torch.cuda.synchronize()
    q_out.put(x[100:200])  # the parent's own memory, sent back
    q_ack.get(timeout=120)


def mp_back():
    """A tensor received by a spawned child and sent back as a view: the parent gets its own
    memory (the same address), with the child's write seen."""
    ctx = torch.multiprocessing.get_context("spawn")
    q_in, q_out, q_ack = ctx.Queue(), ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_mp_back_child, args=(q_in, q_out, q_ack), daemon=True)
    p.start()
    t = torch.zeros(1000, device="cuda")
    q_in.put(t)
    try:
        back = q_out.get(timeout=float(os.environ.get("MP_WAIT", "60")))
    except queue.Empty:
        p.kill()
        result("hung", "no reply from the child within MP_WAIT seconds")
    torch.cuda.synchronize()
    same = back.data_ptr() == t.data_ptr() + 100 * 4
    seen = bool((back == 1).all()) and float(t.sum()) == 100.0
    back += 1  # ours: the parent's t sees it
    ours = float(t[100:200].sum()) == 200.0
    q_ack.put(1)
    p.join(30)
    if not (same and seen and ours):
        result("failed", f"sent back: same memory {same}, child's write seen {seen}, our write in t {ours}")
    result("ok", "a view sent back by the child is the parent's own memory")


def mp_foreign():
    """A CUDA tensor over memory gmlake did not serve (cudaMallocManaged, which gmlake leaves to
    CUDA) put on a torch.multiprocessing Queue: under gmlake's default route it cannot be shared,
    and the program must end at once saying so (never wait for a reply that cannot come)."""
    import ctypes
    rt = ctypes.CDLL(None)
    rt.cudaMallocManaged.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
    p = ctypes.c_void_p()
    n = 1 << 20
    if rt.cudaMallocManaged(ctypes.byref(p), n, 1) != 0:
        result("failed", "cudaMallocManaged failed")

    class Foreign:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "version": 3,
                                    "data": (p.value, False), "strides": None, "stream": None}
    t = torch.as_tensor(Foreign(), device="cuda")
    ctx = torch.multiprocessing.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_mp_child, args=(q_in, q_out, ctx.Queue()), daemon=True)
    child.start()
    q_in.put((t, t, t))
    try:
        q_out.get(timeout=float(os.environ.get("MP_WAIT", "60")))
    except queue.Empty:
        child.kill()
        result("hung", "no error and no reply: the tensor was dropped and the child waited")
    result("ok", "the child replied: the foreign memory was shared")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                               torch.nn.GELU(), torch.nn.Linear(256, 1)).cuda()


def _data():
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(512, 64, device="cuda", generator=g)
    return x, torch.sin(x.sum(1, keepdim=True))


def compile_():
    steps = int(os.environ.get("STEPS", "10"))
    x, y = _data()

    def train(compiled):
        model = _mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        f = torch.compile(model, mode="reduce-overhead") if compiled else model
        losses = []
        for _ in range(steps):
            if compiled:
                torch.compiler.cudagraph_mark_step_begin()
            loss = torch.nn.functional.mse_loss(f(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    eager = train(False)
    try:
        compiled = train(True)
    except Exception as e:
        traceback.print_exc()
        result("failed", f"torch.compile(mode='reduce-overhead') raised {type(e).__name__}: {str(e)[:700]}")
    try:
        from torch._dynamo.utils import counters
        skips = int(counters["inductor"]["cudagraph_skips"])
    except Exception:
        skips = None
    detail = {"eager": eager, "compiled": compiled, "cudagraph_skips": skips}
    if not all(math.isfinite(v) for v in compiled):
        result("failed", "a compiled loss is not finite", **detail)
    if not compiled[-1] < compiled[0]:
        result("failed", "the compiled losses do not decrease", **detail)
    if not all(math.isclose(a, b, rel_tol=1e-2, abs_tol=1e-5) for a, b in zip(eager, compiled)):
        result("failed", "compiled losses differ from eager ones by more than 1%", **detail)
    if skips:
        result("failed", f"torch.compile skipped CUDA graphs {skips} time(s) (see the log)", **detail)
    result("ok", f"{steps} steps under reduce-overhead, losses {compiled[0]:.4f} -> {compiled[-1]:.4f}, "
           "equal to eager within 1%", **detail)


def graph():
    import copy
    model = _mlp()
    ref = copy.deepcopy(model)
    x, y = _data()
    static_x, static_y = x.clone(), y.clone()
    loss_fn = torch.nn.functional.mse_loss
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph's docs ask
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            loss_fn(model(static_x), static_y).backward()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
    worst = 0.0
    for i in range(3):
        gen = torch.Generator(device="cuda").manual_seed(10 + i)
        nx = torch.randn(x.shape, device="cuda", generator=gen)
        ny = torch.sin(nx.sum(1, keepdim=True))
        static_x.copy_(nx)
        static_y.copy_(ny)
        g.replay()
        ref.zero_grad(set_to_none=True)
        loss = loss_fn(ref(nx), ny)
        loss.backward()
        torch.cuda.synchronize()
        pairs = [(static_loss, loss)] + [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())]
        for a, b in pairs:
            if not torch.allclose(a, b, rtol=1e-4, atol=1e-6):
                result("failed", f"replay {i}: the graph's loss or gradient differs from eager "
                       f"(largest difference {float((a - b).abs().max()):.3e})")
            worst = max(worst, float((a - b).abs().max()))
    result("ok", f"forward + backward captured, 3 replays equal to eager (largest difference {worst:.2e})")


def snapshot():
    try:
        torch.cuda.memory._record_memory_history(max_entries=10000)
        keep = [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (1, 3, 8, 20)]
        del keep[1]
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception as e:
        traceback.print_exc()
        result("failed", f"{type(e).__name__}: {str(e)[:400]}",
               backend=torch.cuda.get_allocator_backend())
    segments = snap.get("segments", [])
    events = sum(len(t) for t in snap.get("device_traces", []))
    allocs = sum(1 for t in snap.get("device_traces", []) for e in t if e.get("action") == "alloc")
    if not segments or allocs < 4:
        result("failed", f"snapshot without the allocations: {len(segments)} segments, {events} events, "
               f"{allocs} allocs", backend=torch.cuda.get_allocator_backend())
    result("ok", f"snapshot with {len(segments)} segments and {events} events ({allocs} allocs)",
           backend=torch.cuda.get_allocator_backend())


def cudnn():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "gpu"))
    from cudnn_bench import train
    losses, secs = train()
    if not all(math.isfinite(l) for l in losses):
        result("failed", f"losses {losses}")
    result("ok", f"4 steps of a convolutional net under cudnn.benchmark in {secs:.1f} s, losses {losses}",
           seconds=secs)


def mem_pool():
    try:
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            a = torch.full((1 << 20,), 3.0, device="cuda")
        b = torch.full((1 << 20,), 4.0, device="cuda")
        total = float((a + b).sum())
    except Exception as e:
        result("failed", f"{type(e).__name__}: {str(e)[:600]}", backend=torch.cuda.get_allocator_backend())
    if total != 7.0 * (1 << 20):
        result("failed", f"sum {total}")
    result("ok", f"a tensor in a MemPool ({pool.id}) beside one outside it")


WORKLOADS = {"mp": mp, "mp_back": mp_back, "mp_foreign": mp_foreign, "compile": compile_, "graph": graph,
             "snapshot": snapshot, "cudnn": cudnn, "mem_pool": mem_pool}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in WORKLOADS:
        sys.exit("usage: torch_features.py " + "|".join(WORKLOADS))
    if not torch.cuda.is_available():
        sys.exit("torch_features.py: no CUDA device")
    WORKLOADS[sys.argv[1]]()
