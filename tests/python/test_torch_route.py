"""test_torch_route.py — gmlake's part of PyTorch's import (python/torch_route) without a GPU or torch.

    python3 test_torch_route.py ROUTE_DIR LIBGMLAKE

  * the library puts ROUTE_DIR on PYTHONPATH (once, after the user's entries) and names the
    variable in GMLAKE_PYTORCH_ROUTE exactly when it chooses PyTorch's backend itself, and PyTorch's
    entry-point lookup ("torch.backends") finds gmlake's autoload there;
  * a queue's feeder thread that meets gmlake's sharing error ends the process at once with that
    error, its children stopped, instead of leaving the receiver waiting;
  * the sender's release socket drops the storage kept for a receiver when told its token;
  * autoload does nothing where gmlake did not choose the backend, and never raises;
  * the backend's refusals (reduce-overhead's pool checks, memory history) name gmlake and the way
    out, and only those;
  * a capture into a named graph pool names it to libgmlake for its stream until its end; one
    without a pool names its own, renamed as the graph's pool once captured.
Prints "N passed, M failed"; exit status 1 on any failure.
"""
import os
import socket
import subprocess
import sys
import time
import weakref

results = []


def check(cond, what):
    results.append(bool(cond))
    if not cond:
        print("FAIL:", what)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMLAKE_", "PYTORCH_")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env.update(extra)
    return env


PROBE = ("import os, json\n"
         "from importlib.metadata import entry_points\n"
         "print(json.dumps([os.environ.get('PYTHONPATH'), os.environ.get('GMLAKE_PYTORCH_ROUTE'),\n"
         "  [e.value for e in entry_points(group='torch.backends')]]))\n")


def probe(lib, **env):
    import json
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       env=clean_env(LD_PRELOAD=lib, **env), timeout=60)
    check(p.returncode == 0, "probe ran: " + p.stderr[-500:])
    return json.loads(p.stdout) if p.returncode == 0 else [None, None, []]


def discovery(route_dir, lib):
    real = os.path.realpath(route_dir)
    path, var, eps = probe(lib, PYTHONPATH="/u1:/u2")
    check(path == "/u1:/u2:" + real, "PYTHONPATH keeps the user's entries first, adds ours once: %s" % path)
    check(var == "PYTORCH_CUDA_ALLOC_CONF", "GMLAKE_PYTORCH_ROUTE names the variable: %s" % var)
    check(eps == ["_gmlake_torch:autoload"], "torch.backends entry point found: %s" % eps)
    path, var, eps = probe(lib, PYTORCH_ALLOC_CONF="max_split_size_mb:64")
    check(path == real and var == "PYTORCH_ALLOC_CONF", "the newer variable: %s %s" % (path, var))
    for conf in ("backend:native", "expandable_segments:True"):
        path, var, eps = probe(lib, PYTORCH_CUDA_ALLOC_CONF=conf)
        check(path is None and var is None and eps == [],
              "%s: PyTorch's own allocator, no part of gmlake's in PyTorch's import (%s %s %s)" % (conf, path, var, eps))
    # the user chose the backend gmlake serves through: the same route, so multiprocessing works
    path, var, eps = probe(lib, PYTORCH_ALLOC_CONF="backend:cudaMallocAsync")
    check(path == real and var == "PYTORCH_ALLOC_CONF" and eps == ["_gmlake_torch:autoload"],
          "backend:cudaMallocAsync set by the user: the route too (%s %s %s)" % (path, var, eps))
    path, var, eps = probe(lib, GMLAKE_PYTORCH_BACKEND="off")
    check(path is None and var is None, "pytorch_backend=off: nothing added")
    # a child process of a gmlake process: the variable already names the backend, nothing doubles
    p = subprocess.run([sys.executable, "-c", "import os,subprocess,sys; print(subprocess.run("
                        "[sys.executable,'-c',%r],capture_output=True,text=True).stdout)" % PROBE],
                       capture_output=True, text=True, env=clean_env(LD_PRELOAD=lib), timeout=60)
    check(p.stdout.count(real) == 1, "a child's PYTHONPATH has our folder once: %s" % p.stdout)


FEEDER = r"""
import multiprocessing as mp, os, sys, time
sys.path.insert(0, sys.argv[1])
import _gmlake_torch as g
g._feeder_guard()

class Refused:
    def __reduce__(self):
        raise g._fail("test: its memory is not gmlake's")

def child(q):
    q.get()

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print("child", p.pid, flush=True)
    q.put(Refused())
    time.sleep(60)
    print("still running", flush=True)
"""


def feeder(route_dir, tmp):
    script = os.path.join(tmp, "feeder.py")
    with open(script, "w") as f:
        f.write(FEEDER)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, script, route_dir], capture_output=True, text=True,
                       env=clean_env(GMLAKE_PYTORCH_ROUTE="PYTORCH_CUDA_ALLOC_CONF",
                                     PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync"), timeout=120)
    secs = time.monotonic() - t0
    check(p.returncode == 1, "the process ends with status 1 (%d): %s" % (p.returncode, p.stderr[-800:]))
    check(secs < 30 and "still running" not in p.stdout, "at once (%.1f s)" % secs)
    check("gmlake: torch.multiprocessing cannot send this CUDA tensor: test: its memory is not gmlake's" in p.stderr
          and "PYTORCH_CUDA_ALLOC_CONF=backend:native" in p.stderr, "the error and the way out: " + p.stderr[-800:])
    check("ending this process" in p.stderr, "says it ends the process")
    pid = int(p.stdout.split()[1]) if p.stdout.startswith("child") else 0
    alive = True
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            alive = False
            break
        time.sleep(0.1)
    check(pid and not alive, "the waiting child was stopped (pid %d)" % pid)


def release(route_dir):
    sys.path.insert(0, route_dir)
    import _gmlake_torch as g

    class Storage:
        pass
    s = Storage()
    gone = weakref.ref(s)
    token = os.urandom(16)
    g._held[token] = (s, None, None)
    del s
    addr = g._release_address()
    check(addr == g._release_address(), "one socket per process")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect(addr)
        c.sendall(os.urandom(16))  # an unknown token changes nothing
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect(addr)
        c.sendall(token)
    for _ in range(100):
        if gone() is None:
            break
        time.sleep(0.05)
    check(gone() is None and not g._held, "the storage kept for the receiver was dropped")
    # autoload: nothing without gmlake's route; with it but no torch, a warning, never an exception
    for var in ("GMLAKE_PYTORCH_ROUTE", "PYTORCH_CUDA_ALLOC_CONF"):
        os.environ.pop(var, None)
    check(g.autoload() is None and g._route() is None, "no route: nothing done")
    os.environ.update(GMLAKE_PYTORCH_ROUTE="PYTORCH_CUDA_ALLOC_CONF", PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    check(g._route() == "PYTORCH_CUDA_ALLOC_CONF", "route seen")
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:native"
    check(g._route() is None, "the user changed the backend: no route")
    # read as libgmlake reads it (interpose/pytorch_env.c), as PyTorch does: every blank dropped,
    # every backend entry counts
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:64,\n\tbackend:\tcudaMallocAsync"
    check(g._route() == "PYTORCH_CUDA_ALLOC_CONF", "a backend after a newline and tabs: route seen")
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync,backend:native"
    check(g._route() is None, "a second backend, native: no route")
    # the other variable keeps PyTorch's allocator (a child changed it): PyTorch versions that
    # read PYTORCH_CUDA_ALLOC_CONF first use it, and libgmlake left both alone
    os.environ.update(GMLAKE_PYTORCH_ROUTE="PYTORCH_ALLOC_CONF", PYTORCH_ALLOC_CONF="backend:cudaMallocAsync")
    for other in ("backend:native", "expandable_segments:True"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = other
        check(g._route() is None, "PYTORCH_CUDA_ALLOC_CONF=%s beside the route: no route" % other)
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:64,backend:cudaMallocAsync"
    check(g._route() == "PYTORCH_ALLOC_CONF", "both variables name the backend: route seen")
    del os.environ["PYTORCH_ALLOC_CONF"], os.environ["PYTORCH_CUDA_ALLOC_CONF"]


def refusals(route_dir):
    """The backend's refusals name gmlake; anything else passes untouched."""
    import types
    sys.path.insert(0, route_dir)
    import _gmlake_torch as g
    os.environ.update(GMLAKE_PYTORCH_ROUTE="PYTORCH_CUDA_ALLOC_CONF", PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")

    def refuse(*a):
        raise RuntimeError("cudaMallocAsync does not yet support checkPoolLiveAllocations. If you need it, ...")

    def other(*a):
        raise RuntimeError("CUDA error: out of memory")
    c = types.SimpleNamespace(_cuda_checkPoolLiveAllocations=refuse, _cuda_record_memory_history=other,
                              _cuda_getCheckpointState=lambda d, p: ("state", d, p))
    g.name_refusals(c)
    g.name_refusals(c)  # twice: wrapped once
    try:
        c._cuda_checkPoolLiveAllocations(0, (0, 1), set())
        check(False, "the refusal raised")
    except RuntimeError as e:
        msg = str(e)
        check(isinstance(e, g.GmlakeRouteError) and msg.startswith("gmlake: CUDA graph trees (")
              and "torch.compile(mode=\"reduce-overhead\") then captures plain CUDA graphs" in msg
              and "cudaMallocAsync does not yet support checkPoolLiveAllocations" in msg
              and "PYTORCH_CUDA_ALLOC_CONF=backend:native" in msg and "leave cudagraph_trees off" in msg
              and "tensor on the CPU" not in msg,
              "the refusal names gmlake and the way out (not multiprocessing's): " + msg)
        check(c._cuda_checkPoolLiveAllocations.__wrapped__ is refuse, "wrapped once")
    try:
        c._cuda_record_memory_history()
    except RuntimeError as e:
        check(type(e) is RuntimeError and str(e) == "CUDA error: out of memory", "other errors untouched: %r" % e)
    c2 = types.SimpleNamespace(_cuda_record_memory_history=lambda *a: refuse())
    g.name_refusals(c2)
    try:
        c2._cuda_record_memory_history()
    except RuntimeError as e:
        msg = str(e)
        check(msg.startswith("gmlake: memory history (torch.cuda.memory._record_memory_history) is not available")
              and msg.endswith("which PyTorch's memory_viz opens.") and "gmlake export-snapshot run.trace -o" in msg,
              "memory history: the feature first, gmlake's equivalent after the way out: " + msg)
    class MemPool:  # torch.cuda.memory's: its constructor is where the backend refuses
        def __init__(self, allocator=None):
            if allocator is None:
                raise RuntimeError("cudaMallocAsync does not yet support createOrIncrefPool. If you need it, ...")
            self.allocator = allocator
    mem = types.SimpleNamespace(MemPool=MemPool)
    g.name_refusals(types.SimpleNamespace(), mem)
    g.name_refusals(types.SimpleNamespace(), mem)  # twice: wrapped once
    try:
        mem.MemPool()
        check(False, "MemPool's refusal raised")
    except RuntimeError as e:
        msg = str(e)
        check(isinstance(e, g.GmlakeRouteError) and msg.startswith("gmlake: torch.cuda.MemPool (")
              and "createOrIncrefPool" in msg and "PYTORCH_CUDA_ALLOC_CONF=backend:native" in msg
              and msg.endswith("without gmlake's savings)."),
              "MemPool's refusal names gmlake and the way out: " + msg)
    check(MemPool.__init__.__wrapped__.__name__ == "__init__" and not hasattr(MemPool.__init__.__wrapped__, "__wrapped__"),
          "MemPool wrapped once")
    check(mem.MemPool("mine").allocator == "mine", "a MemPool the backend takes is made as before")
    check(c._cuda_getCheckpointState(1, 2) == ("state", 1, 2), "a call that works returns its value")
    check(not hasattr(c, "_cuda_setCheckpointPoolState"), "absent functions stay absent")


FAKE_CONFIG = """
class triton:
    cudagraph_trees = True
"""


def trees(route_dir):
    """CUDA graph trees go off when torch._inductor.config is imported (not before: a program that
    never compiles never imports it), or at once when it is loaded already; a failure to set it
    leaves the import working and says so."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "torch", "_inductor"))
        for f, text in (("torch/__init__.py", ""), ("torch/_inductor/__init__.py", ""),
                        ("torch/_inductor/config.py", FAKE_CONFIG)):
            with open(os.path.join(tmp, f), "w") as out:
                out.write(text)
        head = "import sys; sys.path[:0] = [%r, %r]; import _gmlake_torch as g\n" % (tmp, route_dir)
        cases = {
            "on import": "import torch; g.graph_trees_off(); g.graph_trees_off()\n"
                         "assert 'torch._inductor.config' not in sys.modules, 'not imported early'\n"
                         "import torch._inductor.config as c; assert c.triton.cudagraph_trees is False\n"
                         "assert sum(isinstance(f, g._AfterImport) for f in sys.meta_path) == 0\n"
                         "c.triton.cudagraph_trees = True; import importlib; importlib.import_module("
                         "'torch._inductor.config'); assert c.triton.cudagraph_trees is True, 'user wins'\n",
            "loaded": "import torch._inductor.config as c; g.graph_trees_off()\n"
                      "assert c.triton.cudagraph_trees is False\n",
            "failing": "g._trees_off = None; g.graph_trees_off()\n"
                       "import torch._inductor.config as c; assert c.triton.cudagraph_trees is True\n",
        }
        for name, body in cases.items():
            r = subprocess.run([sys.executable, "-c", head + body], capture_output=True, text=True, timeout=60)
            ok = r.returncode == 0
            if name == "failing":
                ok = ok and "gmlake: could not turn CUDA graph trees off" in r.stderr
            check(ok, "graph trees, %s: %s %s" % (name, r.stdout, r.stderr))


def resharing(route_dir):
    """A received tensor is sent on under its exporter's handle, at its offset in that allocation,
    while any tensor of this process still maps it."""
    sys.path.insert(0, route_dir)
    import _gmlake_torch as g
    h = b"H" * 64
    a = g._Imported(h, 0x10000, 0x100, 0x1000, 0, "\0nowhere", b"t" * 16)  # bytes [0x100, 0x1100)
    b = g._Imported(h, 0x10000, 0x2000, 0x10, 0, "\0nowhere", b"u" * 16)  # the same mapping
    check(g._received(0x10000 + 0x180) == (h, 0x180), "offset in the exporter's allocation")
    check(g._received(0x10000 + 0x2008) == (h, 0x2008), "the larger extent of the two opens")
    check(g._received(0x10000 + 0x2010) is None and g._received(0x5) is None, "outside: not received")
    del a  # its release fails here (no torch, no CUDA): the sender is not told, nothing raises
    check(g._received(0x10000 + 0x180) == (h, 0x180), "still mapped by the other tensor")
    del b
    check(g._received(0x10000 + 0x180) is None and not g._imports, "the last one unmaps")


class FakeTorch:
    """Just enough of torch for _share and _rebuild: storages are address ranges, "CUDA" is a
    dict of handles, events remember whether they are alive."""

    def __init__(self):
        import types
        ft = self
        self.events_alive = 0

        class UntypedStorage:
            def __init__(self, ptr, nbytes, keep=None):
                self.ptr, self.n, self.keep = ptr, nbytes, keep
                self.is_cuda, self.device = True, types.SimpleNamespace(index=0, type="cuda")

            def data_ptr(self):
                return self.ptr

            def nbytes(self):
                return self.n

        class Tensor:
            is_cuda, requires_grad, is_leaf, is_nested, layout = True, False, True, "strided", None

            def __init__(self, storage=None, offset=0, size=(0,), stride=(1,), dtype="f32"):
                self.s, self.off, self.sz, self.st, self.dtype = storage, offset, size, stride, dtype
                self.device = types.SimpleNamespace(index=0, type="cuda")

            def untyped_storage(self):
                return self.s

            def size(self):
                return self.sz

            def stride(self):
                return self.st

            def storage_offset(self):
                return self.off

            def set_(self, storage, offset, size, stride):
                self.s, self.off, self.sz, self.st = storage, offset, size, stride
                return self

            def requires_grad_(self, r):
                self.requires_grad = r
                return self

            def element_size(self):
                return 4

        class Event:
            def __init__(self, interprocess=False):
                ft.events_alive += 1
                self.recorded = False

            def __del__(self):
                ft.events_alive -= 1

            def record(self, stream):
                self.recorded = True

            def ipc_handle(self):
                return b"E" * 64

            @staticmethod
            def from_ipc_handle(device, handle):
                return "imported event"

        class Stream:
            waited = []

            def wait_event(self, e):
                Stream.waited.append(e)

        class Ctx:
            def __enter__(self):
                return self

            def __exit__(self, *a):
                return False

        Tensor.layout = "strided"
        self.strided, self.uint8 = "strided", "u8"
        self.Tensor, self.UntypedStorage, self.Stream = Tensor, UntypedStorage, Stream
        self.nn = types.SimpleNamespace(Parameter=type("Parameter", (Tensor,), {}))
        self.cuda = types.SimpleNamespace(Event=Event, device=lambda d: Ctx(), synchronize=lambda d=None: None,
                                          current_stream=lambda d=None: Stream())

    def as_tensor(self, obj, device):
        ptr, n = obj.__cuda_array_interface__["data"][0], obj.__cuda_array_interface__["shape"][0]
        return self.Tensor(self.UntypedStorage(ptr, n, keep=obj))

    def empty(self, shape, dtype, device):
        return self.Tensor(dtype=dtype)


class FakeCuda:
    """The process's cudaIpc* and gmlake_allocation_range, over a table of allocations; an
    opened handle maps at 0x900000 + 0x100000 x (its export number)."""

    def __init__(self, allocations):
        self.allocations, self.exports, self.opened, self.closed = allocations, [], [], []

    def gmlake_allocation_range(self, ptr, base, size):
        for b, n in self.allocations:
            if b <= ptr.value < b + n:
                base._obj.value, size._obj.value = b, n
                return 0
        return 2

    def cudaIpcGetMemHandle(self, buf, ptr):
        base = [b for b, n in self.allocations if b <= ptr.value < b + n][0]
        self.exports.append(base)
        buf.raw = (b"%d" % base).ljust(64, b" ")
        return 0

    def cudaIpcOpenMemHandle(self, out, handle, flags):
        base = int(bytes(handle.reserved).strip())
        out._obj.value = 0x900000 + 0x100000 * (self.exports.index(base) + 1)
        self.opened.append(out._obj.value)
        return 0

    def cudaIpcCloseMemHandle(self, ptr):
        self.closed.append(ptr.value)
        return 0


def round_trip(route_dir):
    """_share then _rebuild (as another process would: its pid is not ours), with a fake torch and
    fake CUDA: the offset of a view, the event kept until the release, the release drains what
    the sender held, a received tensor sent on keeps its exporter's handle and offset."""
    sys.path.insert(0, route_dir)
    import _gmlake_torch as g
    torch = FakeTorch()
    g._api = FakeCuda([(0x100000, 0x40000)])
    sys.modules["torch"] = torch
    try:
        st = torch.UntypedStorage(0x100000 + 0x1000, 0x2000)  # a storage 4 KiB into its allocation
        t = torch.Tensor(st, offset=16, size=(8,), stride=(2,))
        fn, args = g._share(torch, st, 0, "f32", t.size(), t.stride(), t.storage_offset(), False, False)
        check(fn is g._rebuild and args[1] == 0x1000, "the storage's offset in its allocation: %#x" % args[1])
        check(len(g._held) == 1 and torch.events_alive == 1, "storage and event held for the receiver")
        args = list(args)
        args[4] = os.getpid() + 1  # from another process
        saved = dict(g._exported)  # the receiver is another process: our exports are not its
        g._exported.clear()
        got = g._rebuild(*args)
        g._exported.update(saved)
        mapped = g._api.opened[0]
        check(got.untyped_storage().data_ptr() == mapped + 0x1000 and got.off == 16 and got.sz == (8,)
              and got.st == (2,), "rebuilt over the mapping at the offset, with the view's geometry")
        check(torch.Stream.waited == ["imported event"], "the receiver's stream waits for the event")
        # sent on: the received storage goes out under the exporter's handle and offset
        fn2, args2 = g._share(torch, got.untyped_storage(), 0, "f32", (8,), (2,), 16, False, False)
        check(args2[0] == args[0] and args2[1] == 0x1000 and len(g._api.exports) == 1,
              "re-shared with the exporter's handle, no new export")
        check(len(g._held) == 2, "the forwarder holds its copy for the next receiver")
        # the forwarded tensor reaches the process that exported the memory (us: its handle is
        # ours): rebuilt over our own storage, and the forwarder's copy released at once
        args2 = list(args2)
        args2[4] = os.getpid() + 2
        back = g._rebuild(*args2)
        check(back.untyped_storage() is st and back.off == 16 and len(g._api.opened) == 1,
              "sent back to its exporter: our own storage at the view's offset, nothing opened")
        for _ in range(100):
            if len(g._held) == 1:
                break
            time.sleep(0.05)
        check(len(g._held) == 1 and g._api.closed == [], "the forwarder's copy released, the mapping still in use")
        del back
        del got
        import gc
        gc.collect()
        for _ in range(100):
            if not g._held:
                break
            time.sleep(0.05)
        check(g._api.closed == [mapped], "the mapping was closed once: %s" % g._api.closed)
        check(not g._held and not g._imports and not g._exported,
              "the sender dropped what it held (%d left) and forgot the export" % len(g._held))
        gc.collect()
        check(torch.events_alive == 0, "events go with what was held (%d alive)" % torch.events_alive)
        # a holder dropped while the lock is held (the cyclic collector inside a locked section)
        h = g._Imported(b"x" * 64, 0x700000, 0, 16, 0, "\0nowhere", b"v" * 16)
        with g._held_lock:
            del h
        check(not g._imports, "no deadlock when a holder goes inside a locked section")
    finally:
        del sys.modules["torch"]
        g._api = None


def graph_pools(route_dir):
    """A capture into a pool the program names (CUDAGraph.capture_begin(pool)) names it to
    libgmlake for the capture's stream (gmlake_graph_pool) until capture_end, also when the
    capture fails to begin; a capture without a pool (None, or PyTorch's (0, 0)) names a pool of
    its own, which takes the name of the graph's pool once captured (gmlake_graph_pool_rename), so
    that a later capture passing graph.pool() shares it; the class is wrapped once."""
    import types
    sys.path.insert(0, route_dir)
    import _gmlake_torch as g
    calls, renames = [], []
    fake = types.SimpleNamespace(gmlake_graph_pool=lambda s, k: calls.append((s.value, k.value)) or 0,
                                 gmlake_graph_pool_rename=lambda a, b: renames.append((a.value, b.value)) or 0)
    saved = g._cuda
    g._cuda = lambda: fake
    try:
        class Graph:
            def capture_begin(self, pool=None, capture_error_mode="global"):
                if pool == (9, 9):
                    raise RuntimeError("begin failed")
                self.began = (pool, capture_error_mode)

            def capture_end(self):
                self.ended = True

            def pool(self):
                return (3, 4)
        g.share_graph_pools(Graph, lambda: 0x77)
        g.share_graph_pools(Graph, lambda: 0x77)
        check(not hasattr(Graph.capture_begin.__wrapped__, "__wrapped__"), "wrapped once")
        gr = Graph()
        gr.capture_begin((0, 5), capture_error_mode="thread_local")
        check(calls == [(0x77, 5)] and gr.began == ((0, 5), "thread_local"), "the pool named: %s" % calls)
        gr.capture_end()
        check(calls[-1] == (0x77, 0) and gr.ended and not renames,
              "and unnamed at the capture's end: %s %s" % (calls, renames))
        try:
            gr.capture_begin((9, 9))
            check(False, "a failing begin raises")
        except RuntimeError:
            check(calls[-2:] == [(0x77, (9 << 32) | 9), (0x77, 0)] and not renames,
                  "a failing begin unnames: %s" % calls)
        check(g.pool_key((1, 2)) == (1 << 32) | 2 and g.pool_key((1 << 32, 0)) == 1 << 63, "keys are nonzero")
        # no pool (None, or (0, 0): CUDAGraph::capture_begin's default): the graph's own private
        # pool, shared with no other graph (they may run at the same time) until one names it
        for none in ((), ((0, 0),)):
            del calls[:], renames[:]
            gr.capture_begin(*none)
            gr.capture_end()
            own = calls[0][1] if calls else 0
            check(len(calls) == 2 and own >> 62 == 1 and calls[1] == (0x77, 0)
                  and renames == [(own, (3 << 32) | 4)],
                  "no pool %s: a pool of its own, renamed as graph.pool(): %s %s" % (none, calls, renames))
        del calls[:]
        gr.capture_begin()
        gr.capture_end()
        check(calls[0][1] != own, "each graph's own pool is another")
        # a pool the wrapper cannot read is PyTorch's to judge: passed on unchanged, nothing named
        del calls[:], renames[:]
        odd = (1, 2, 3)
        try:
            gr.capture_begin(odd)
            gr.capture_end()
            check(gr.began == (odd, "global") and calls == [] and not renames,
                  "an unreadable pool is passed on, nothing named: %s %s" % (calls, renames))
        except ValueError as e:
            check(False, "an unreadable pool raised in the wrapper, not in PyTorch: %r" % e)
        # libgmlake refused (GMLAKE_ERR_NOMEM): nothing to undo at the end
        fake.gmlake_graph_pool = lambda s, k: calls.append((s.value, k.value)) or 6
        del calls[:], renames[:]
        gr.capture_begin((1, 1))
        gr.capture_end()
        check(calls == [(0x77, (1 << 32) | 1)] and not renames, "a refused name is not unnamed: %s" % calls)
    finally:
        g._cuda = saved


FAKE_TORCH = {
    "torch/__init__.py": "import types\nclass Tensor: pass\n_C = types.SimpleNamespace()\n"
                         "from . import nn, cuda\n",
    "torch/nn/__init__.py": "from torch import Tensor\nclass Parameter(Tensor): pass\n",
    "torch/cuda/__init__.py": "",
    "torch/cuda/memory.py": "",
    "torch/cuda/graphs.py": "",  # no CUDAGraph: wrapping it fails
    "torch/multiprocessing/__init__.py": "",
    "torch/multiprocessing/reductions.py": "def reduce_tensor(t): return (None, ())\n"
                                           "def reduce_storage(s): return (None, ())\n",
}


def install_survives(route_dir):
    """install() registers the reducers for CUDA tensors even where naming graph pools fails
    (a torch.cuda.graphs without CUDAGraph), and says what is lost."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for f, text in FAKE_TORCH.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(f)), exist_ok=True)
            with open(os.path.join(tmp, f), "w") as out:
                out.write(text)
        body = ("import sys; sys.path[:0] = [%r, %r]; import _gmlake_torch as g, torch\n"
                "g.install()\n"
                "from multiprocessing.reduction import ForkingPickler as P\n"
                "assert P._extra_reducers.get(torch.Tensor) is not None, 'tensor reducer'\n"
                "assert P._extra_reducers.get(torch.nn.Parameter) is not None, 'parameter reducer'\n"
                "print('ok')\n" % (tmp, route_dir))
        r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and r.stdout.strip() == "ok"
              and "gmlake: CUDA graphs captured into one pool will not share memory" in r.stderr,
              "install: reducers registered, the graph part's failure said: %s %s" % (r.stdout, r.stderr[-600:]))


def main():
    import tempfile
    route_dir, lib = sys.argv[1], sys.argv[2]
    discovery(route_dir, lib)
    with tempfile.TemporaryDirectory() as tmp:
        feeder(route_dir, tmp)
    release(route_dir)
    refusals(route_dir)
    trees(route_dir)
    resharing(route_dir)
    round_trip(route_dir)
    graph_pools(route_dir)
    install_survives(route_dir)
    print("%d passed, %d failed" % (results.count(True), results.count(False)))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
