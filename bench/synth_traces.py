"""bench/synth_traces.py OUTDIR — six synthetic gmlake-trace v1 files (fixed seeds, so the same
bytes every time) of workloads the recorded traces do not cover, to check that a pool or extent
change is not fitted to the recorded ones:
  small_varlen  a 12-layer, 768-wide transformer with checkpointing, batch 8, length 64..512 per
                step (activations of 0.1-6 MiB: sub-chunk fragments), 32k vocabulary
  mid_nockpt    16 x 1024, no checkpointing, batch 4..12 x length 128..1024, 50k vocabulary
  tiny          4 x 256, a pool below 128 MiB
  kvcache       generation: a KV cache per layer re-allocated larger every 16 tokens, batch and
                prompt length varying per request
  random        log-uniform sizes 1 MiB..256 MiB with random lifetimes (up to 200 live)
  emptied       small_varlen's model (another seed) calling torch.cuda.empty_cache() after every
                step (an E event): the pool regrows every step
Replay them with `build/tools/gmlake-replay --policy expandable,gmlake OUTDIR/*.trace.gz`."""
import gzip, os, random, sys
MiB = 1 << 20
class T:
    def __init__(s, fn): s.f = gzip.open(fn, 'wt'); s.f.write('# gmlake-trace v1: op ptr size stream t_us (bench/synth_traces.py)\n'); s.addr = 0x300000000; s.t = 0; s.live = {}
    def a(s, size):
        size = max(1, int(size)); p = s.addr; s.addr += (size + 4095) // 4096 * 4096 + 4096
        s.t += 1; s.f.write(f"A {p:#x} {size} 0x0 {s.t}\n"); s.live[p] = size; return p
    def fr(s, p):
        s.t += 1; s.f.write(f"F {p:#x} 0 0x0 {s.t}\n"); del s.live[p]
    def empty(s):
        s.t += 1; s.f.write(f"E 0x0 0 0xffffffffffffffff {s.t}\n")
    def close(s): s.f.close()
def rnd4(x): return (int(x) + 511) // 512 * 512

def transformer(fn, seed, layers, hidden, vocab, batch, lens, steps, ckpt, empty=False):
    r = random.Random(seed); t = T(fn)
    params = [t.a(hidden * hidden * 4 * 2) for _ in range(layers * 4)] + [t.a(vocab * hidden * 2)]
    opt = [t.a(t.live[p] * 2) for p in params]
    for step in range(steps):
        L = r.choice(lens); B = batch if isinstance(batch, int) else r.choice(batch)
        tok = B * L
        acts = []
        for l in range(layers):
            keep = [t.a(rnd4(tok * hidden * 2))] if ckpt else [t.a(rnd4(tok * hidden * 2 * k)) for k in (1, 3, 4, 1)]
            tmp = [t.a(rnd4(tok * hidden * 2 * 4)), t.a(rnd4(B * 16 * L * L * 2))]
            for p in tmp: t.fr(p)
            acts.append(keep)
        logits = t.a(rnd4(tok * vocab * 4)); lg = t.a(rnd4(tok * vocab * 4)); t.fr(logits)
        grads = []
        for l in reversed(range(layers)):
            if ckpt:
                re = [t.a(rnd4(tok * hidden * 2 * k)) for k in (1, 3, 4, 1)]
            else:
                re = []
            g = [t.a(rnd4(tok * hidden * 2)), t.a(rnd4(tok * hidden * 2 * 4))]
            if step == 0: grads += [t.a(hidden * hidden * 4 * 2) for _ in range(4)]
            for p in g + re: t.fr(p)
            for p in acts[l]: t.fr(p)
        t.fr(lg)
        if empty: t.empty()
    t.close()

def kvcache(fn, seed, steps):
    r = random.Random(seed); t = T(fn)
    params = [t.a(r.choice([8, 16, 32, 64]) * MiB) for _ in range(80)]
    for req in range(steps):
        B = r.choice([1, 2, 4, 8, 16]); P = r.randint(32, 1024); G = r.randint(16, 256)
        per_tok = B * 32 * 2 * 4096 * 2 // 32  # per layer kv bytes / token
        kv = [t.a(rnd4(per_tok * P)) for _ in range(32)]
        for g in range(0, G, 16):
            n = [t.a(rnd4(per_tok * (P + g + 16))) for _ in range(32)]
            tmp = t.a(rnd4(B * 50000 * 4)); t.fr(tmp)
            for p in kv: t.fr(p)
            kv = n
        for p in kv: t.fr(p)
    t.close()

def randomlife(fn, seed, n):
    r = random.Random(seed); t = T(fn); live = []
    for i in range(n):
        if live and (len(live) > 200 or r.random() < 0.45):
            t.fr(live.pop(r.randrange(len(live))))
        else:
            live.append(t.a(rnd4(2 ** r.uniform(20, 28))))
    for p in live: t.fr(p)
    t.close()

if len(sys.argv) != 2:
    sys.exit(__doc__)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
transformer(f'{out}/small_varlen.trace.gz', 1, 12, 768, 32000, 8, [64, 128, 256, 384, 512], 40, True)
transformer(f'{out}/mid_nockpt.trace.gz', 2, 16, 1024, 50000, [4, 8, 12], [128, 256, 512, 1024], 40, False)
transformer(f'{out}/tiny.trace.gz', 3, 4, 256, 8000, 4, [32, 64, 128], 40, False)
kvcache(f'{out}/kvcache.trace.gz', 4, 60)
randomlife(f'{out}/random.trace.gz', 5, 20000)
transformer(f'{out}/emptied.trace.gz', 6, 12, 768, 32000, 8, [64, 128, 256, 384, 512], 40, True, empty=True)
