"""What JAX's `platform` allocator costs: seconds per training step of a small MLP, under the
allocator named by XLA_PYTHON_CLIENT_ALLOCATOR (run once per setting; prints one JSON line).

    for a in default platform; do
      XLA_PYTHON_CLIENT_ALLOCATOR=$a python3 tests/gpu/jax_platform_speed.py          # without gmlake
    done
    XLA_PYTHON_CLIENT_ALLOCATOR=platform LD_PRELOAD=$PWD/build/interpose/libgmlake.so \
      python3 tests/gpu/jax_platform_speed.py                                          # with gmlake
"""
import json, os, time

if os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR") == "default":
    del os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"]
import jax
import jax.numpy as jnp

key = jax.random.PRNGKey(0)
sizes = [1024, 4096, 4096, 1024]
params = [jax.random.normal(k, (a, b)) * 0.02 for k, a, b in
          zip(jax.random.split(key, len(sizes) - 1), sizes[:-1], sizes[1:])]


def loss(ps, x):
    for w in ps:
        x = jnp.tanh(x @ w)
    return jnp.mean(x * x)


grad = jax.grad(loss)
steps = int(os.environ.get("STEPS", "200"))
times = []
for i in range(steps):
    x = jax.random.normal(jax.random.PRNGKey(i), (256 + 64 * (i % 4), sizes[0]))
    t = time.perf_counter()
    g = grad(params, x)  # op by op (no jit): one allocation per intermediate
    params = [p - 1e-3 * d for p, d in zip(params, g)]
    jax.block_until_ready(params)
    times.append(time.perf_counter() - t)
warm = sorted(times[steps // 4:])
print(json.dumps({"allocator": os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default (BFC)"),
                  "gmlake": "libgmlake" in os.environ.get("LD_PRELOAD", ""),
                  "median_step_ms": round(1000 * warm[len(warm) // 2], 3),
                  "p90_step_ms": round(1000 * warm[int(len(warm) * 0.9)], 3), "steps": steps}))
