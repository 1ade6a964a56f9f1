"""bench/gpu/stream_pool_memory.py — device memory of PyTorch's pool of CUDA streams (issue 22:
the ~70 MiB that PyTorch's cudaMallocAsync backend costs at its first allocation, which creates
that pool for its free stream).  One child a case; each prints the device's used memory
(cudaMemGetInfo) after the context, after the first torch.cuda.Stream() (which creates the whole
pool) and after a kernel on it.  Usage: python3 stream_pool_memory.py [ENV=VALUE ...]: each
argument a case run with that variable set (none: the default alone)."""
import json, os, subprocess, sys


def child():
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context, and PyTorch's own first allocation
    torch.cuda.synchronize()

    def used():
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**20
    out = {"context": used()}
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    out["first Stream()"] = used()
    with torch.cuda.stream(s):
        torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    out["kernel on it"] = used()
    out["pool_streams_diff_mib"] = round(out["first Stream()"] - out["context"], 1)
    print(json.dumps(out))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child()
    cases = sys.argv[1:] or [""]
    for case in cases:
        env = dict(os.environ)
        if case:
            k, v = case.split("=", 1)
            env[k] = v
        r = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True,
                           text=True, timeout=120)
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
        print(json.dumps({"case": case or "default", "rc": r.returncode, "result": last}))


if __name__ == "__main__":
    main()
