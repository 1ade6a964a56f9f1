/*
 * bench_graphs.c — what a capture's allocations cost as graphs accumulate in one graph pool, as an
 * inference server captures one graph per batch size into a shared pool (vLLM, SGLang): over the
 * fake CUDA of tests/fake (no GPU), libgmlake preloaded.  Each graph is a forward pass of LAYERS
 * layers: per layer four temporaries (1-32 KiB) freed inside the capture and one output kept
 * live to the capture's end (what a graph's outputs are), so that every capture leaves pieces its
 * later allocations and later captures into the pool may reuse.  All graphs stay alive, as a
 * server keeps them.  Prints ns per captured allocation for the first graph and for each eighth
 * of them after it: a search that walks every piece of every graph grows with the graphs.
 *   LD_PRELOAD=build/interpose/libgmlake.so build/bench/bench_graphs [GRAPHS] [LAYERS]
 * Exits 1 when the allocations were not served by gmlake (not preloaded) or a call failed.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "gmlake.h"

enum { TEMPS = 4, MAXGRAPHS = 4096, MAXLAYERS = 4096 };

static size_t size_at(uint64_t *r)
{
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return 1024 + (size_t)(*r >> 16) % (31 << 10);
}

/* Captures one forward pass on s; returns its wall ns, or -1 on a failed call.  out[] gets the
 * layers' outputs (freed by the caller once the graph is instantiated). */
static double capture(cudaStream_t s, int layers, uint64_t *r, void **out, CUgraphExec *exec)
{
    double t0 = bench_now_ns();
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -1;
    for (int l = 0; l < layers; l++) {
        void *t[TEMPS];
        for (int i = 0; i < TEMPS; i++)
            if (cudaMallocAsync(&t[i], size_at(r), s) != cudaSuccess)
                return -1;
        if (cudaMallocAsync(&out[l], size_at(r), s) != cudaSuccess)
            return -1;
        for (int i = 0; i < TEMPS; i++)
            if (cudaFreeAsync(t[i], s) != cudaSuccess)
                return -1;
    }
    cudaGraph_t g;
    if (cudaStreamEndCapture(s, &g) != cudaSuccess)
        return -1;
    double t = bench_now_ns() - t0;
    if (cuGraphInstantiateWithFlags(exec, (CUgraph)g, 0) != CUDA_SUCCESS ||
        cuGraphDestroy((CUgraph)g) != CUDA_SUCCESS)
        return -1;
    return t;
}

int main(int argc, char **argv)
{
    int graphs = argc > 1 ? atoi(argv[1]) : 128;
    int layers = argc > 2 ? atoi(argv[2]) : 64;
    if (graphs < 1 || graphs > MAXGRAPHS || layers < 1 || layers > MAXLAYERS) {
        fprintf(stderr, "usage: bench_graphs [GRAPHS 1..%d] [LAYERS 1..%d]\n", MAXGRAPHS, MAXLAYERS);
        return 2;
    }
    int (*get_stats)(int, gmlake_stats *) = (int (*)(int, gmlake_stats *))dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    int (*graph_pool)(void *, uint64_t) = (int (*)(void *, uint64_t))dlsym(RTLD_DEFAULT, "gmlake_graph_pool");
    if (!get_stats || !graph_pool) {
        fprintf(stderr, "bench_graphs: libgmlake is not loaded (run with LD_PRELOAD=.../libgmlake.so)\n");
        return 1;
    }
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess || graph_pool(s, 7) != GMLAKE_OK) {
        fprintf(stderr, "bench_graphs: no stream or graph pool\n");
        return 1;
    }
    CUgraphExec *execs = calloc((size_t)graphs, sizeof *execs);
    void **out = calloc((size_t)layers, sizeof *out);
    double *ns = calloc((size_t)graphs, sizeof *ns);
    if (!execs || !out || !ns)
        return 1;
    uint64_t r = 88172645463325252ull;
    gmlake_stats before = {0}, after = {0};
    get_stats(0, &before);
    for (int g = 0; g < graphs; g++) {
        if ((ns[g] = capture(s, layers, &r, out, &execs[g])) < 0) {
            fprintf(stderr, "bench_graphs: graph %d: a call failed\n", g);
            return 1;
        }
        for (int l = 0; l < layers; l++) /* the outputs stay the graph's */
            if (cudaFreeAsync(out[l], s) != cudaSuccess)
                return 1;
    }
    get_stats(0, &after);
    uint64_t per = (uint64_t)layers * (TEMPS + 1);
    if (after.allocations - before.allocations < (uint64_t)graphs) { /* a new slab at least a graph */
        fprintf(stderr, "bench_graphs: gmlake served none of the captures' memory\n");
        return 1;
    }
    printf("%d graphs of %d layers in one graph pool, %lu allocations a capture; ns per captured "
           "allocation (with its frees):\n", graphs, layers, (unsigned long)per);
    int step = graphs >= 8 ? graphs / 8 : 1;
    for (int g = 0; g < graphs; g += g ? step : step - 1 > 0 ? step - 1 : 1)
        printf("  graph %d: %.0f\n", g + 1, ns[g] / (double)per);
    if ((graphs - 1) % step != step - 1 && graphs > 1)
        printf("  graph %d: %.0f\n", graphs, ns[graphs - 1] / (double)per);
    printf("reserved by the pool at the end: %.1f MiB\n", (double)after.reserved_bytes / 1048576.0);
    for (int g = 0; g < graphs; g++)
        cuGraphExecDestroy(execs[g]);
    cudaStreamDestroy(s);
    return 0;
}
