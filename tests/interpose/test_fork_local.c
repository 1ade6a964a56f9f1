/* test_fork_local.c — fork while another thread holds gmlake's lock on the caller-scope lookups
 * (interpose/resolve.c, a runtime loaded with dlopen(RTLD_LOCAL)): the child then makes a runtime
 * call that gmlake resolves in the caller's scope, and must return (a child left with that lock
 * held by a thread that does not exist in it hangs; its alarm kills it after 10 s).  The plugin
 * (fork_plugin.c) makes the other thread's lookup slow.  Plain program; PLUGIN is the path. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int (*slow_lookup)(void), (*lookup_entered)(void), (*plugin_malloc)(void);

static void *lookup(void *arg)
{
    (void)arg;
    slow_lookup();
    return NULL;
}

int main(void)
{
    void *h = dlopen(PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "test_fork_local: dlopen of the plugin: %s\n0 passed, 1 failed\n", dlerror());
        return 1;
    }
    *(void **)&slow_lookup = dlsym(h, "plugin_slow_lookup");
    *(void **)&lookup_entered = dlsym(h, "plugin_lookup_entered");
    *(void **)&plugin_malloc = dlsym(h, "plugin_malloc");
    if (!slow_lookup || !lookup_entered || !plugin_malloc) {
        fprintf(stderr, "test_fork_local: the plugin's functions\n0 passed, 1 failed\n");
        return 1;
    }
    /* gmlake loads its settings (and registers its fork handlers) on its first hook lookup; no
     * runtime call yet: the plugin's cudaPeekAtLastError must be looked up first by the thread */
    if (!dlsym(RTLD_DEFAULT, "cudaMalloc")) {
        fprintf(stderr, "test_fork_local: gmlake exports cudaMalloc\n0 passed, 1 failed\n");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, lookup, NULL);
    struct timespec tick = {.tv_nsec = 1000000};
    for (int i = 0; i < 10000 && !lookup_entered(); i++)
        nanosleep(&tick, NULL);
    if (!lookup_entered()) {
        fprintf(stderr, "test_fork_local: the plugin's slow lookup never started\n0 passed, 1 failed\n");
        return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        plugin_malloc(); /* CUDA's after-fork error or not: it must return */
        _exit(0);
    }
    int st = 0, ok = pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    pthread_join(t, NULL);
    if (!ok)
        fprintf(stderr, "test_fork_local: failed: the child %s\n",
                pid > 0 && WIFSIGNALED(st) ? "hung (killed by its alarm)" : "did not finish");
    printf("%d passed, %d failed\n", ok, !ok);
    return !ok;
}
