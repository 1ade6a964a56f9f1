// bench/gpu/stream_probe.cu — what CUDA does with stream handles it does not know: a destroyed
// stream and a garbage pointer, each passed to cuStreamGetCtx and cudaMallocAsync in a child
// process of its own (the parent reports a child killed by a signal).  Run it plain, with
// LD_PRELOAD of libgmlake and GMLAKE_ENABLE=0, and under gmlake:
//   nvcc -O1 -arch=sm_90 -o build/gpu/stream_probe bench/gpu/stream_probe.cu -lcuda
//   build/gpu/stream_probe
// On one H200 with CUDA 13 (session 26) every child died of SIGSEGV in all three ways: such a
// handle is undefined behaviour in CUDA itself, so gmlake has no answer of CUDA's to match
// (docs/ARCHITECTURE.md, "The preload layer").
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void)
{
    // fork before CUDA init in the parent would be cleaner: the children init CUDA themselves
    pid_t pid = fork();
    if (pid == 0) {
        cudaStream_t s;
        cudaFree(0);
        cudaStreamCreate(&s);
        cudaStreamDestroy(s);
        CUcontext c = NULL;
        CUresult r = cuStreamGetCtx((CUstream)s, &c);
        printf("destroyed: cuStreamGetCtx -> %d\n", (int)r);
        void *p = NULL;
        cudaError_t e = cudaMallocAsync(&p, 1 << 20, s);
        printf("destroyed: cudaMallocAsync -> %d (%s) p %p\n", (int)e, cudaGetErrorName(e), p);
        if (e == cudaSuccess)
            printf("destroyed: cudaFreeAsync -> %d\n", (int)cudaFreeAsync(p, s));
        printf("destroyed: sync -> %d\n", (int)cudaDeviceSynchronize());
        fflush(stdout);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    printf("destroyed: child %s %d\n", WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    pid = fork();
    if (pid == 0) {
        cudaStream_t g = (cudaStream_t)(uintptr_t)0x123456;
        cudaFree(0);
        CUcontext c = NULL;
        printf("garbage: cuStreamGetCtx -> %d\n", (int)cuStreamGetCtx((CUstream)g, &c));
        fflush(stdout);
        void *p = NULL;
        cudaError_t e = cudaMallocAsync(&p, 1 << 20, g);
        printf("garbage: cudaMallocAsync -> %d (%s) p %p\n", (int)e, cudaGetErrorName(e), p);
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, &st, 0);
    printf("garbage: child %s %d\n", WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    return 0;
}
