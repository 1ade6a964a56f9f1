"""_gmlake_torch — what PyTorch's cudaMallocAsync backend cannot do, done by gmlake, when gmlake
chose that backend (interpose/pytorch_env.c).

libgmlake sets PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync by itself (or finds it set) so
that every tensor reaches it.  That backend refuses to share CUDA memory between processes (shareIpcHandle), so a
CUDA tensor sent through torch.multiprocessing was dropped in the queue's feeder thread and the
receiver waited forever.  Where the library sets (or finds) the backend it also puts this folder on
PYTHONPATH and names the variable in GMLAKE_PYTORCH_ROUTE; PyTorch runs `autoload` at the end of
`import torch` (its "torch.backends" entry point, see the dist-info beside this file; off with
TORCH_DEVICE_BACKEND_AUTOLOAD=0).  `autoload` then:

  * shares CUDA tensors (and parameters, and untyped storages) through torch.multiprocessing with
    gmlake's own CUDA IPC (cudaIpcGetMemHandle on gmlake memory: its physical extents travel as
    file descriptors), the way PyTorch's native allocator does with its own:
      - the sender records an interprocess event on its current stream; the receiver's current
        stream waits for it before using the tensor;
      - the sender keeps the storage alive until the receiver's copy is gone: the receiver, when
        its tensor's memory is released, waits for its device, closes the handle and tells the
        sender (a Unix socket of the sender's, named by a random key) which it may now drop;
  * makes torch.compile(mode="reduce-overhead") capture plain CUDA graphs: CUDA graph trees
    check and checkpoint PyTorch's own pool, which that backend refuses, so gmlake sets
    torch._inductor.config.triton.cudagraph_trees to False when that module is first imported
    (a program may set it back); the memory such a graph captures is gmlake's, held for the
    graph's life (interpose/graphmem.c);
  * tells libgmlake which graph pool a CUDA graph capture goes into (torch.cuda.graph(pool=...)),
    so that captures into one pool share the memory they freed inside themselves, as PyTorch's
    private pools let them (gmlake_graph_pool);
  * makes the refusals of that backend name gmlake, why and the way out: CUDA graph trees asked
    for explicitly and memory history snapshots raise PyTorch's "cudaMallocAsync does not yet
    support ..." otherwise, which never says that gmlake is behind the backend (gmlake's snapshot
    equivalent: gmlake export-snapshot);
  * hands a process back its own memory when a receiver sends a tensor back (or forwards one it
    received), as PyTorch does, instead of opening its own handle;
  * where sharing cannot work (memory gmlake did not serve, a tensor subclass), fails at once
    with an error that names gmlake and the way out: in the thread that sends, or, when that is a
    queue's feeder thread (whose errors Python only prints, the receiver then waiting forever),
    by ending the process with that error after stopping its child processes.

It never raises out of autoload: PyTorch would turn that into a failed `import torch`.
"""
import ctypes
import itertools
import os
import socket
import sys
import threading
import time

_ROUTE_ENV = "GMLAKE_PYTORCH_ROUTE"
_HANDLE_BYTES = 64  # cudaIpcMemHandle_t
_held = {}  # token -> (storage, event, handle if our own export else None) kept for a receiver
_imports = {}  # base of a mapping this process opened -> [handle, bytes from base, holders]
_exported = {}  # handle this process exported -> (storage, the allocation's first byte), while held
# reentrant: a holder's __del__ (which takes it) may run inside a section that holds it, when the
# cyclic collector runs at an allocation there or a popped entry was the last reference
_held_lock = threading.RLock()
_server = None  # (pid, address) of this process's release socket
_server_lock = threading.Lock()
_api = None


class _Handle(ctypes.Structure):
    """cudaIpcMemHandle_t, passed by value to cudaIpcOpenMemHandle."""
    _fields_ = [("reserved", ctypes.c_char * _HANDLE_BYTES)]


_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def _asks(conf):
    """What a PyTorch allocator setting asks for, read as PyTorch and libgmlake read it (every
    blank dropped, every entry; interpose/pytorch_env.c conf_asks): "other" (a backend other than
    cudaMallocAsync, or expandable_segments without a backend), "async" or None."""
    entries = ["".join(e.split()).partition(":") for e in conf.split(",")]
    backends = {v for k, _, v in entries if k == "backend"}
    if backends - {"cudaMallocAsync"}:
        return "other"
    if backends:
        return "async"
    return "other" if any(k == "expandable_segments" and (v.lower() == "true" or v == "1")
                          for k, _, v in entries) else None


def _route():
    """The variable that names PyTorch's cudaMallocAsync backend, through which gmlake serves
    PyTorch (libgmlake set it, or found it set), or None: it no longer names it, or the other
    variable keeps PyTorch's own allocator (PyTorch versions differ on which of the two they
    read first)."""
    var = os.environ.get(_ROUTE_ENV)
    if var not in _CONF_VARS or _asks(os.environ.get(var, "")) != "async":
        return None
    return None if any(_asks(os.environ.get(v, "")) == "other" for v in _CONF_VARS) else var


def way_out(alternative="or send the tensor on the CPU"):
    var = _route() or "PYTORCH_CUDA_ALLOC_CONF"
    return ("set %s=backend:native to keep PyTorch's own allocator (gmlake then serves its segments: "
            "every PyTorch feature works, without gmlake's savings)%s"
            % (var, ", " + alternative if alternative else ""))


class GmlakeSharingError(RuntimeError):
    pass


def _fail(what):
    return GmlakeSharingError(
        "gmlake: torch.multiprocessing cannot send this CUDA tensor: %s.  Your tensors reach gmlake "
        "through PyTorch's cudaMallocAsync backend, which cannot share CUDA memory itself; "
        "%s." % (what, way_out()))


def _cuda():
    """The process's cudaIpc* functions, looked up in its global scope: the preloaded libgmlake's
    hooks come first there (they pass memory gmlake did not serve on to CUDA)."""
    global _api
    if _api is None:
        g = ctypes.CDLL(None)
        for name in ("cudaIpcGetMemHandle", "cudaIpcOpenMemHandle", "cudaIpcCloseMemHandle",
                     "gmlake_allocation_range", "cudaGetErrorString"):
            if not hasattr(g, name):
                raise OSError("%s not found in the process (is libgmlake preloaded?)" % name)
        g.cudaIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        g.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _Handle, ctypes.c_uint]
        g.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        g.gmlake_allocation_range.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.POINTER(ctypes.c_size_t)]
        g.cudaGetErrorString.restype = ctypes.c_char_p
        for name in ("cudaIpcGetMemHandle", "cudaIpcOpenMemHandle", "cudaIpcCloseMemHandle",
                     "gmlake_allocation_range"):
            getattr(g, name).restype = ctypes.c_int
        _api = g
    return _api


def _cuda_error(rc):
    try:
        return "%s (CUDA error %d)" % (_cuda().cudaGetErrorString(rc).decode(), rc)
    except Exception:
        return "CUDA error %d" % rc


# --- the sender -----------------------------------------------------------------------------

def _drop(token):
    """What was held for token (None if nothing), forgetting its export once no receiver is left."""
    with _held_lock:
        kept = _held.pop(token, None)
        if kept and kept[2] is not None and not any(v[2] == kept[2] for v in _held.values()):
            _exported.pop(kept[2], None)
        return kept


def _serve(sock):
    """Release requests: 16-byte tokens; each drops the storage kept for it."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:  # out of descriptors, say: keep serving (what is held stays held meanwhile)
            time.sleep(0.1)
            continue
        try:
            with conn:
                conn.settimeout(5)
                token = conn.recv(16)
            kept = _drop(token)
            del kept  # the last reference may free the storage: outside the lock
        except Exception:  # one bad request (or a failing free) must not end the service
            continue


def _release_address():
    """This process's release socket (an abstract Unix socket), started at the first send."""
    global _server
    with _server_lock:
        if _server is None or _server[0] != os.getpid():  # a forked child starts its own
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            addr = "\0gmlake-torch-%d-%s" % (os.getpid(), os.urandom(8).hex())
            sock.bind(addr)
            sock.listen(64)
            threading.Thread(target=_serve, args=(sock,), name="gmlake-torch-release",
                             daemon=True).start()
            _server = (os.getpid(), addr)
        return _server[1]


def _received(ptr):
    """(handle, offset of ptr in the exporter's allocation) for memory this process received, or
    None: a received tensor is sent on with its exporter's handle."""
    with _held_lock:
        for base, (handle, size, _) in list(_imports.items()):
            if base <= ptr < base + size:
                return handle, ptr - base
    return None


def _export(torch, storage, device):
    """(handle bytes, offset of the storage in the allocation, whether the allocation is ours) for a
    CUDA storage gmlake served here, or one this process received (sent on under its exporter's
    handle)."""
    api = _cuda()
    ptr = storage.data_ptr()
    got = _received(ptr)
    if got:
        return got + (False,)
    base, size = ctypes.c_void_p(), ctypes.c_size_t()
    if api.gmlake_allocation_range(ctypes.c_void_p(ptr), ctypes.byref(base), ctypes.byref(size)) != 0:
        raise _fail("its memory (%#x on cuda:%d) is not gmlake's: another library allocated it, "
                    "or it was freed" % (ptr, device))
    handle = ctypes.create_string_buffer(_HANDLE_BYTES)
    with torch.cuda.device(device):
        rc = api.cudaIpcGetMemHandle(handle, ctypes.c_void_p(ptr))
    if rc != 0:
        raise _fail("exporting its memory failed: %s" % _cuda_error(rc))
    return handle.raw, ptr - base.value, True


def _reduce_tensor(original):
    def reduce_tensor(tensor):
        import torch
        if not tensor.is_cuda or _route() is None:
            return original(tensor)
        if tensor.requires_grad and not tensor.is_leaf:
            return original(tensor)  # PyTorch's own refusal, with its own words
        if tensor.layout != torch.strided or tensor.is_nested:
            raise _fail("gmlake shares strided tensors only, not %s" % tensor.layout)
        cls = type(tensor)
        if cls not in (torch.Tensor, torch.nn.Parameter):
            raise _fail("gmlake shares plain tensors and parameters, not %s" % cls.__name__)
        return _share(torch, tensor.untyped_storage(), tensor.device.index, tensor.dtype,
                      tuple(tensor.size()), tuple(tensor.stride()), tensor.storage_offset(),
                      tensor.requires_grad, cls is torch.nn.Parameter)
    return reduce_tensor


def _reduce_storage(original):
    def reduce_storage(storage):
        import torch
        if not storage.is_cuda or _route() is None:
            return original(storage)
        if not isinstance(storage, torch.UntypedStorage):
            raise _fail("gmlake shares tensors and untyped storages, not %s" % type(storage).__name__)
        n = storage.nbytes()
        return _share(torch, storage, storage.device.index, torch.uint8, (n,), (1,), 0, False, False,
                      as_storage=True)
    return reduce_storage


def _share(torch, storage, device, dtype, size, stride, offset, requires_grad, parameter,
           as_storage=False):
    meta = (device, dtype, size, stride, offset, requires_grad, parameter, as_storage)
    if storage.nbytes() == 0:  # no memory to share
        return _rebuild_empty, meta
    handle, head, own = _export(torch, storage, device)
    address = _release_address()
    event = torch.cuda.Event(interprocess=True)
    with torch.cuda.device(device):
        event.record(torch.cuda.current_stream(device))
    token = os.urandom(16)
    with _held_lock:  # the event too: a receiver may open it only while the sender's lives
        _held[token] = (storage, event, handle if own else None)
        if own:  # our memory: a receiver may send it back to us (_rebuild finds it here)
            _exported.setdefault(handle, (storage, storage.data_ptr() - head))
    return _rebuild, (handle, head, storage.nbytes(), event.ipc_handle(), os.getpid(),
                      address, token) + meta


# --- the receiver ---------------------------------------------------------------------------

class _Imported:
    """The receiver's view of the sender's memory: torch.as_tensor keeps it alive as long as any
    tensor uses that memory; when it goes, the device is waited for, the handle closed and the
    sender told."""

    def __init__(self, handle, base, head, nbytes, device, address, token):
        self.base, self.device, self.address, self.token = base, device, address, token
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                         "data": (base + head, False), "strides": None,
                                         "stream": None}
        with _held_lock:  # the same handle opened twice maps once (gmlake counts the opens)
            entry = _imports.setdefault(base, [handle, 0, 0])
            entry[1], entry[2] = max(entry[1], head + nbytes), entry[2] + 1

    def __del__(self):
        try:
            with _held_lock:
                entry = _imports.get(self.base)
                if entry and entry[2] > 1:
                    entry[2] -= 1
                elif entry:
                    del _imports[self.base]
            import torch
            torch.cuda.synchronize(self.device)  # no kernel of ours may still use it
            if _cuda().cudaIpcCloseMemHandle(ctypes.c_void_p(self.base)) != 0:
                return
        except Exception:
            # during a graph capture, a sticky error, the interpreter's shutdown: the sender is
            # not told, and keeps the memory (a leak until it exits, never a reuse under our work)
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(self.address)
                s.sendall(self.token)
        except OSError:
            pass  # the sender is gone: nothing holds the memory but our mapping, now closed


def _assemble(torch, storage, device, dtype, size, stride, offset, requires_grad, parameter,
              as_storage):
    if as_storage:
        return storage
    t = torch.empty((0,), dtype=dtype, device="cuda:%d" % device)
    t.set_(storage, offset, size, stride)
    if parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    t.requires_grad_(requires_grad)
    return t


def _rebuild_empty(device, dtype, size, stride, offset, requires_grad, parameter, as_storage):
    import torch
    storage = torch.UntypedStorage(0, device="cuda:%d" % device)
    return _assemble(torch, storage, device, dtype, size, stride, offset, requires_grad, parameter,
                     as_storage)


def _returned(torch, handle, head, nbytes, event_handle, address, token, device, dtype, offset,
              as_storage):
    """Memory this process exported, sent back by a receiver (or one it forwarded to): the tensor
    is rebuilt over our own storage, after the sender's work; the sender's hold is released at
    once (our memory lives as long as our own storage does).  None when it is not ours."""
    with _held_lock:
        mine = _exported.get(handle)
    if mine is None:
        return None
    storage, first = mine
    delta = first + head - storage.data_ptr()  # bytes from our storage's start
    size = torch.empty((0,), dtype=dtype, device="cuda:%d" % device).element_size()
    if delta < 0 or delta + nbytes > storage.nbytes() or delta % size or (as_storage and delta):
        raise _fail("a tensor sent back to the process that exported its memory lies outside "
                    "that process's storage (bytes %d..%d of it)" % (delta, delta + nbytes))
    torch.cuda.current_stream(device).wait_event(torch.cuda.Event.from_ipc_handle(device, event_handle))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(address)
            s.sendall(token)
    except OSError:
        pass  # the sender is gone
    return storage, offset + delta // size


def _rebuild(handle, head, nbytes, event_handle, pid, address, token, device, dtype, size, stride,
             offset, requires_grad, parameter, as_storage):
    import torch
    back = None if pid == os.getpid() else _returned(torch, handle, head, nbytes, event_handle,
                                                     address, token, device, dtype, offset,
                                                     as_storage)
    if pid == os.getpid():  # sent to itself: the storage is here
        kept = _drop(token)
        if kept is None:
            raise _fail("it was sent by this process and its pickle was already unpickled here once")
        storage = kept[0]
    elif back is not None:
        storage, offset = back
    else:
        api = _cuda()
        base = ctypes.c_void_p()
        with torch.cuda.device(device):
            rc = api.cudaIpcOpenMemHandle(ctypes.byref(base), _Handle.from_buffer_copy(handle),
                                          1)  # cudaIpcMemLazyEnablePeerAccess
        if rc != 0:
            raise _fail("opening the sender's memory (process %d) failed: %s" % (pid, _cuda_error(rc)))
        holder = _Imported(handle, base.value, head, nbytes, device, address, token)
        storage = torch.as_tensor(holder, device="cuda:%d" % device).untyped_storage()
        if storage.data_ptr() != base.value + head:  # as_tensor copied (another device?)
            raise _fail("the sender's memory opened at %#x on cuda:%d, but PyTorch copied it "
                        "(its device is not cuda:%d here)" % (base.value + head, device, device))
        event = torch.cuda.Event.from_ipc_handle(device, event_handle)
        torch.cuda.current_stream(device).wait_event(event)
    return _assemble(torch, storage, device, dtype, size, stride, offset, requires_grad, parameter,
                     as_storage)


# --- the backend's other refusals ------------------------------------------------------------

# torch._C functions the cudaMallocAsync backend refuses: the feature a user knows them by, and
# what gmlake offers instead (None: nothing but the way out)
_GRAPH_TREES = ("CUDA graph trees (torch._inductor.config.triton.cudagraph_trees, which gmlake "
                'turns off by default: torch.compile(mode="reduce-overhead") then captures plain '
                "CUDA graphs)", "or leave cudagraph_trees off")
_HISTORY = ("memory history (torch.cuda.memory._record_memory_history)",
            "or use gmlake's own: record a trace (GMLAKE_TRACE_FILE=run.trace) and convert it with "
            "`gmlake export-snapshot run.trace -o snapshot.pickle`, which PyTorch's memory_viz opens")
REFUSED = {
    "_cuda_checkPoolLiveAllocations": _GRAPH_TREES,
    "_cuda_getCheckpointState": _GRAPH_TREES,
    "_cuda_setCheckpointPoolState": _GRAPH_TREES,
    "_cuda_record_memory_history": _HISTORY,
    "_cuda_record_memory_history_legacy": _HISTORY,
}


class GmlakeRouteError(RuntimeError):
    pass


def _named(fn, refused):
    what, instead = refused
    def refused_by_the_backend(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            if "cudaMallocAsync does not yet support" not in str(e):
                raise
            raise GmlakeRouteError(
                "gmlake: %s is not available under PyTorch's cudaMallocAsync backend, through which "
                "your tensors reach gmlake (PyTorch: %s); %s." % (what, e, way_out(instead))) from e
    refused_by_the_backend.__wrapped__ = fn
    return refused_by_the_backend


# a class whose constructor the backend refuses (torch.cuda.memory's MemPool: createOrIncrefPool)
_MEM_POOL = ("torch.cuda.MemPool (private memory pools, torch.cuda.use_mem_pool, NCCL buffer "
             "registration through a pool)", None)


def name_refusals(torch_c, memory=None):
    """Wraps the refusing functions of torch._C (those present), and MemPool's constructor in
    torch.cuda.memory where given, so that their error names gmlake."""
    for name, refused in REFUSED.items():
        fn = getattr(torch_c, name, None)
        if fn is not None and not hasattr(fn, "__wrapped__"):
            setattr(torch_c, name, _named(fn, refused))
    pool = getattr(memory, "MemPool", None) if memory is not None else None
    if isinstance(pool, type) and not hasattr(pool.__init__, "__wrapped__"):
        pool.__init__ = _named(pool.__init__, _MEM_POOL)


# --- CUDA graphs without graph trees --------------------------------------------------------

_INDUCTOR_CONFIG = "torch._inductor.config"


def _trees_off(config):
    config.triton.cudagraph_trees = False


class _AfterImport:
    """A meta path finder that runs `then(module)` once `name` has been imported, and only then:
    PyTorch's compiler stays unimported in programs that never compile."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        import importlib.machinery
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader:
    def __init__(self, loader, then):
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            self.then(sys.modules.get(module.__name__, module))
        except Exception as e:  # never fail the import
            sys.stderr.write("gmlake: could not turn CUDA graph trees off (%s: %s); "
                             'torch.compile(mode="reduce-overhead") may fail; set '
                             "torch._inductor.config.triton.cudagraph_trees = False\n"
                             % (type(e).__name__, e))

    def __getattr__(self, name):
        return getattr(self.loader, name)


def graph_trees_off():
    """CUDA graph trees off in torch._inductor.config: now if it is loaded, else when it is."""
    loaded = sys.modules.get(_INDUCTOR_CONFIG)
    if loaded is not None:
        _trees_off(loaded)
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_INDUCTOR_CONFIG, _trees_off))


# --- CUDA graphs that share a pool ---------------------------------------------------------

def pool_key(pool):
    """A 64-bit number for PyTorch's graph pool id (a pair of integers): 0 for (0, 0), which
    PyTorch takes as no pool (the graph's own private one), nonzero for any other."""
    a, b = (int(x) for x in pool)
    if not a and not b:
        return 0
    key = ((a & 0xFFFFFFFF) << 32) | (b & 0xFFFFFFFF)
    return key or 1 << 63


def _graph_pool(stream, key):
    """Names graph pool `key` (0: none) for the captures begun on `stream` (gmlake_graph_pool);
    whether libgmlake took it (an older library without the function: no)."""
    g = _cuda()
    fn = getattr(g, "gmlake_graph_pool", None)
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    fn.restype = ctypes.c_int
    return fn(ctypes.c_void_p(stream), ctypes.c_uint64(key)) == 0


def _graph_pool_rename(old, new):
    """Graph pool `old` is now `new` in libgmlake (gmlake_graph_pool_rename)."""
    fn = getattr(_cuda(), "gmlake_graph_pool_rename", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
        fn.restype = ctypes.c_int
        fn(ctypes.c_uint64(old), ctypes.c_uint64(new))


_provisional = itertools.count(1)


def share_graph_pools(graph_cls, current_stream):
    """Wraps graph_cls.capture_begin / capture_end (torch.cuda.CUDAGraph) so that a capture into
    a pool the program names (torch.cuda.graph(pool=...), CUDAGraph.capture_begin(pool)) tells
    libgmlake which pool it goes into: captures into one pool may then reuse the memory the
    others freed inside themselves, as PyTorch's private pools let them.  current_stream() gives
    the capture's stream handle (PyTorch captures on the current stream)."""
    begin, end = graph_cls.capture_begin, graph_cls.capture_end
    if hasattr(begin, "__wrapped__"):
        return
    named = {}  # id(graph) -> the stream whose pool it named

    def capture_begin(self, pool=None, *args, **kwargs):
        # a graph without a pool gets its own (PyTorch names it only once captured: graph.pool(),
        # which a later capture may pass to share it): a key of its own until then
        try:
            key = pool_key(pool) if pool is not None else 0
            provisional = 0 if key else 1 << 62 | next(_provisional)
            s = current_stream()
            if _graph_pool(s, key or provisional):
                named[id(self)] = (s, provisional)
        except Exception:
            pass  # no sharing: each capture keeps its own memory
        try:
            return begin(self, pool, *args, **kwargs)
        except BaseException:
            _unname(named.pop(id(self), None), None)
            raise

    def capture_end(self):
        try:
            return end(self)
        finally:
            _unname(named.pop(id(self), None), self)

    capture_begin.__wrapped__, capture_end.__wrapped__ = begin, end
    graph_cls.capture_begin, graph_cls.capture_end = capture_begin, capture_end


def _unname(entry, graph):
    """The capture's stream names no pool any more; a provisional pool takes the name PyTorch
    gave the graph's own pool, where the capture ended with one (graph.pool())."""
    if entry is None:
        return
    stream, provisional = entry
    try:
        _graph_pool(stream, 0)
        if provisional and graph is not None and hasattr(graph, "pool"):
            final = pool_key(graph.pool())
            if final:
                _graph_pool_rename(provisional, final)
    except Exception:
        pass


# --- installation ---------------------------------------------------------------------------

def _feeder_guard():
    """A queue's feeder thread only prints what pickling raised, and the receiver then waits
    forever: for gmlake's errors, end the process instead (after its children), with the error."""
    from multiprocessing import queues
    original = queues.Queue._on_queue_feeder_error

    def on_queue_feeder_error(e, obj):
        if not isinstance(e, GmlakeSharingError):
            return original(e, obj)
        try:
            import multiprocessing
            sys.stderr.write("%s\ngmlake: ending this process (pid %d) rather than leave the "
                             "receiver waiting for a tensor that was never sent\n" % (e, os.getpid()))
            for child in multiprocessing.active_children():
                child.terminate()
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            os._exit(1)
    queues.Queue._on_queue_feeder_error = staticmethod(on_queue_feeder_error)


def install():
    """Registers gmlake's reducers for CUDA tensors and storages with multiprocessing's pickler
    (in place of PyTorch's, which call back to them for everything but gmlake's case), names
    gmlake in the backend's refusals, and names graph pools to libgmlake (share_graph_pools)."""
    import torch
    import torch.cuda.memory
    name_refusals(torch._C, torch.cuda.memory)
    graph_trees_off()
    import torch.multiprocessing.reductions as red
    from multiprocessing.reduction import ForkingPickler
    wrap = {red.reduce_tensor: _reduce_tensor(red.reduce_tensor),
            red.reduce_storage: _reduce_storage(red.reduce_storage)}
    for cls, fn in list(ForkingPickler._extra_reducers.items()):
        if fn in wrap:
            ForkingPickler.register(cls, wrap[fn])
    for cls in (torch.Tensor, torch.nn.Parameter):
        if ForkingPickler._extra_reducers.get(cls) is None:
            ForkingPickler.register(cls, wrap[red.reduce_tensor])
    _feeder_guard()
    try:  # last, and on its own: tensor sharing does not depend on it
        import torch.cuda.graphs
        share_graph_pools(torch.cuda.graphs.CUDAGraph, lambda: torch.cuda.current_stream().cuda_stream)
    except Exception as e:
        sys.stderr.write("gmlake: CUDA graphs captured into one pool will not share memory under "
                         "gmlake (%s: %s)\n" % (type(e).__name__, e))


def autoload():
    """PyTorch's "torch.backends" entry point: installs where gmlake serves PyTorch through the
    cudaMallocAsync backend."""
    if _route() is None:
        return
    try:
        _cuda()
    except OSError:
        return  # a process without libgmlake (its environment inherited): PyTorch's own rules
    try:
        install()
    except Exception as e:  # never fail `import torch`
        sys.stderr.write("gmlake: torch.multiprocessing will not share CUDA tensors under gmlake "
                         "(%s: %s); %s\n" % (type(e).__name__, e, way_out()))
