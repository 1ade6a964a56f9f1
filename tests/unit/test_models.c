/* test_models.c — the models of PyTorch's allocators on sequences whose behaviour is derived by
 * hand from CUDACachingAllocator.cpp (the expected reserved bytes are exact), and the policy
 * interface over gmlake's pool. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/cost.h"
#include "tools/charge.h"
#include "tools/policy.h"
#include "trace_text.h"

#define NEAR(a, b) (fabs((a) - (b)) <= 1e-15 + 1e-9 * fabs(b))

static gml_policy *make(const char *name, uint64_t capacity, const char *set_key, const char *value)
{
    gml_model_options o;
    gml_model_options_default(&o);
    char err[256] = "";
    if (set_key)
        cr_assert_eq(gml_model_option_set(&o, set_key, value, err, sizeof err), 0, "%s", err);
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    gml_policy *p = gml_policy_create(name, capacity, &s, &o, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    return p;
}

static uint64_t A(gml_policy *p, uint64_t size, uint64_t stream)
{
    uint64_t addr = 0;
    cr_assert_eq(p->ops->alloc(p, size, stream, &addr), GMLAKE_OK, "alloc %llu", (unsigned long long)size);
    cr_assert_neq(addr, 0);
    char why[256];
    cr_assert_eq(p->ops->check(p, why, sizeof why), GMLAKE_OK, "%s", why);
    return addr;
}

static void F(gml_policy *p, uint64_t addr)
{
    cr_assert_eq(p->ops->free(p, addr, 0), GMLAKE_OK);
    char why[256];
    cr_assert_eq(p->ops->check(p, why, sizeof why), GMLAKE_OK, "%s", why);
}

#define GiB ((uint64_t)1 << 30)

Test(models, small_requests_pack_into_2MiB_segments)
{
    gml_policy *p = make("pytorch", 8 * GiB, NULL, NULL);
    uint64_t a = A(p, 100, 0); /* rounded to 512 bytes, in a new 2 MiB small segment */
    cr_assert_eq(p->reserved, 2 * MiB);
    uint64_t b = A(p, MiB, 0); /* 1 MiB is still small: split from the rest of the segment */
    cr_assert_eq(b, a + 512, "best fit in the same segment, right after the first block");
    cr_assert_eq(p->reserved, 2 * MiB);
    A(p, MiB, 0); /* 2 MiB - 512 - 1 MiB left: too little, a second segment */
    cr_assert_eq(p->reserved, 4 * MiB);
    cr_assert_eq(p->calls[GML_CALL_CUDA_MALLOC], 2);
    gml_policy_destroy(p);
}

Test(models, large_requests_20MiB_segments_and_split_rule)
{
    gml_policy *p = make("pytorch", 8 * GiB, NULL, NULL);
    uint64_t a = A(p, 3 * MiB, 0); /* 1-10 MiB: a 20 MiB segment, split */
    cr_assert_eq(p->reserved, 20 * MiB);
    uint64_t b = A(p, 5 * MiB, 0); /* from the 17 MiB remainder */
    cr_assert_eq(b, a + 3 * MiB);
    cr_assert_eq(p->reserved, 20 * MiB);
    A(p, 13 * MiB, 0); /* >= 10 MiB: its own segment, rounded to 2 MiB: 14 MiB */
    cr_assert_eq(p->reserved, 34 * MiB);
    F(p, a);
    F(p, b); /* merged with the free 3 MiB before and the 12 MiB after: 20 MiB free */
    /* 19.5 MiB leaves 0.5 MiB: a large block is split only when more than 1 MiB remains */
    A(p, 19 * MiB + 512 * KiB, 0);
    A(p, 1536 * KiB, 0); /* so nothing is left for this: a new 20 MiB segment */
    cr_assert_eq(p->reserved, 54 * MiB);
    /* another stream never shares the first stream's free blocks */
    uint64_t c = A(p, 2 * MiB, 0); /* 18.5 MiB left in the last segment */
    cr_assert_eq(p->reserved, 54 * MiB);
    A(p, 2 * MiB, 7);
    cr_assert_eq(p->reserved, 74 * MiB);
    F(p, c);
    gml_policy_destroy(p);
}

Test(models, best_fit_takes_the_smallest_block_that_fits)
{
    gml_policy *p = make("pytorch", 8 * GiB, NULL, NULL);
    uint64_t a = A(p, 12 * MiB, 0), b = A(p, 16 * MiB, 0);
    uint64_t keep = A(p, 12 * MiB, 0);
    cr_assert_eq(p->reserved, 40 * MiB);
    F(p, b);
    F(p, a);
    uint64_t c = A(p, 11 * MiB, 0); /* 12 MiB block fits best; 1 MiB left: not split */
    cr_assert_eq(c, a);
    uint64_t d = A(p, 14 * MiB, 0); /* the 16 MiB block; 2 MiB left: split */
    cr_assert_eq(d, b);
    A(p, 2 * MiB, 0); /* takes the 2 MiB tail */
    cr_assert_eq(p->reserved, 40 * MiB);
    F(p, keep);
    gml_policy_destroy(p);
}

Test(models, max_split_size_keeps_oversize_blocks_whole)
{
    for (int limited = 0; limited < 2; limited++) {
        gml_policy *p = make("pytorch", 8 * GiB, limited ? "pytorch.max_split_size_mb" : NULL, "40");
        uint64_t a = A(p, 50 * MiB, 0);
        F(p, a);
        A(p, 45 * MiB, 0); /* oversize block within 20 MiB of the request: served (not split) */
        cr_assert_eq(p->reserved, 50 * MiB);
        gml_policy_destroy(p);
        p = make("pytorch", 8 * GiB, limited ? "pytorch.max_split_size_mb" : NULL, "40");
        a = A(p, 50 * MiB, 0);
        F(p, a);
        A(p, 10 * MiB, 0);
        /* default: split from the 50 MiB block; limited: an oversize block never serves a
         * request below max_split_size, so a new 10 MiB segment */
        cr_assert_eq(p->reserved, limited ? 60 * MiB : 50 * MiB, "limited %d", limited);
        gml_policy_destroy(p);
    }
}

Test(models, roundup_power2_divisions)
{
    for (int div = 0; div < 2; div++) {
        gml_policy *p = make("pytorch", 8 * GiB, div ? "pytorch.roundup_power2_divisions" : NULL, "4");
        A(p, 5 * MiB + 1, 0); /* divisions 4: between 4 and 8 MiB in 1 MiB steps: 6 MiB */
        A(p, 14 * MiB + 512 * KiB, 0);
        /* without: 15 MiB - 512 left in the 20 MiB segment, enough; with: 14 MiB left, not
         * enough, and the request itself rounds to 16 MiB (8-16 MiB in 2 MiB steps) */
        cr_assert_eq(p->reserved, div ? 36 * MiB : 20 * MiB, "divisions %d", div);
        gml_policy_destroy(p);
    }
    gml_model_options o;
    gml_model_options_default(&o);
    char err[256];
    cr_assert_eq(gml_model_option_set(&o, "pytorch.roundup_power2_divisions", "3", err, sizeof err), -1);
    cr_assert(strstr(err, "power of two"), "%s", err);
    cr_assert_eq(gml_model_option_set(&o, "expandable.max_split_size_mb", "20", err, sizeof err), -1);
    cr_assert(strstr(err, "above 20"), "%s", err);
    cr_assert_eq(gml_model_option_set(&o, "pytorch.nope", "1", err, sizeof err), -1);
    cr_assert(strstr(err, "unknown model setting"), "%s", err);
    cr_assert_eq(gml_model_option_set(&o, "stitch", "on", err, sizeof err), 1, "not a model key");
}

/* A trace's E event (torch.cuda.empty_cache()): every free segment goes back, as PyTorch's
 * emptyCache releases them; live ones stay. */
Test(models, empty_cache_releases_the_free_segments)
{
    static const char *const names[] = {"pytorch", "expandable", "gmlake"};
    for (int i = 0; i < 3; i++) {
        gml_policy *p = make(names[i], 1024 * MiB, NULL, NULL);
        uint64_t keep = A(p, 30 * MiB, 0), gone = A(p, 60 * MiB, 0);
        F(p, gone);
        cr_assert_geq(p->reserved, 90 * MiB, "%s", names[i]);
        p->ops->empty_cache(p);
        /* what stays is the live block's memory: its segment, its chunks, or its 20 MiB pages */
        cr_assert_leq(p->reserved, 40 * MiB, "%s: the free 60 MiB went back (%llu held)", names[i],
                      (unsigned long long)p->reserved);
        cr_assert_geq(p->reserved, 30 * MiB, "%s: the live block stays", names[i]);
        char why[256];
        cr_assert_eq(p->ops->check(p, why, sizeof why), GMLAKE_OK, "%s: %s", names[i], why);
        F(p, keep);
        p->ops->empty_cache(p);
        cr_assert_eq(p->reserved, 0, "%s", names[i]);
        gml_policy_destroy(p);
    }
}

Test(models, out_of_memory_releases_cached_segments_then_fails)
{
    gml_policy *p = make("pytorch", 60 * MiB, NULL, NULL);
    uint64_t a = A(p, 30 * MiB, 0);
    F(p, a);
    A(p, 40 * MiB, 0); /* 30 + 40 > 60: the cached 30 MiB segment is cudaFree'd, then it fits */
    cr_assert_eq(p->reserved, 40 * MiB);
    cr_assert_eq(p->calls[GML_CALL_CUDA_FREE], 1);
    uint64_t addr;
    cr_assert_eq(p->ops->alloc(p, 30 * MiB, 0, &addr), GMLAKE_ERR_NOMEM);
    cr_assert_eq(p->reserved, 40 * MiB);
    gml_policy_destroy(p);
}

Test(models, expandable_grows_one_range_per_stream_and_pool)
{
    gml_policy *p = make("expandable", 8 * GiB, NULL, NULL);
    uint64_t a = A(p, 3 * MiB, 0); /* one 20 MiB page mapped, the rest split off */
    cr_assert_eq(p->reserved, 20 * MiB);
    uint64_t b = A(p, 18 * MiB, 0); /* 17 MiB free + one more page, contiguous */
    cr_assert_eq(b, a + 3 * MiB);
    cr_assert_eq(p->reserved, 40 * MiB); /* the native allocator would hold 20 + 18 MiB */
    A(p, 100, 0);                        /* the small pool: its own range, 2 MiB pages */
    cr_assert_eq(p->reserved, 42 * MiB);
    A(p, 3 * MiB, 5); /* another stream: its own range */
    cr_assert_eq(p->reserved, 62 * MiB);
    cr_assert_eq(p->calls[GMLAKE_DC_VA_RESERVE], 3);
    cr_assert_eq(p->calls[GMLAKE_DC_MAP], 2 + 1 + 1);
    cr_assert_eq(p->calls[GMLAKE_DC_CHUNK_CREATE], 4);
    F(p, a);
    F(p, b); /* freed pages stay mapped */
    cr_assert_eq(p->reserved, 62 * MiB);
    uint64_t c = A(p, 39 * MiB, 0); /* fits the 40 MiB mapped and free at the start */
    cr_assert_eq(c, a);
    cr_assert_eq(p->reserved, 62 * MiB);
    gml_policy_destroy(p);
}

Test(models, expandable_unmaps_free_pages_when_a_mapping_fails)
{
    gml_policy *p = make("expandable", 50 * MiB, NULL, NULL);
    uint64_t a = A(p, 30 * MiB, 0);
    cr_assert_eq(p->reserved, 40 * MiB);
    F(p, a);
    A(p, 15 * MiB, 2); /* a new range for stream 2: 40 + 20 > 50, so stream 0's pages go */
    cr_assert_eq(p->reserved, 20 * MiB);
    cr_assert_eq(p->calls[GMLAKE_DC_UNMAP], 2);
    cr_assert_eq(p->calls[GMLAKE_DC_VA_FREE], 1, "the emptied range is given back");
    uint64_t addr;
    cr_assert_eq(p->ops->alloc(p, 40 * MiB, 2, &addr), GMLAKE_ERR_NOMEM);
    gml_policy_destroy(p);
}

Test(models, policy_names)
{
    cr_assert(gml_policy_known("pytorch") && gml_policy_known("expandable") &&
              gml_policy_known("gmlake") && gml_policy_known("bestfit") &&
              gml_policy_known("no-stitch"));
    cr_assert(!gml_policy_known("tcmalloc"));
    char err[256];
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    cr_assert_null(gml_policy_create("tcmalloc", GiB, &s, NULL, err, sizeof err));
    cr_assert(strstr(err, "unknown policy 'tcmalloc'"), "%s", err);
    gml_policy *p = gml_policy_create("gmlake", GiB, &s, NULL, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    uint64_t a = A(p, 3 * MiB, 0);
    cr_assert_eq(p->reserved, 4 * MiB, "gmlake: two 2 MiB chunks");
    F(p, a);
    gml_policy_destroy(p);
    cr_assert_str_eq(gml_call_name(GML_CALL_CUDA_MALLOC), "cuda_malloc");
    cr_assert_str_eq(gml_call_name(GMLAKE_DC_MAP), "map");
}

/* Every modelled call is charged its estimated driver time (core/cost.h): VMM kinds as the sim
 * device charges them (set_access and unmap per handle), cudaMalloc / cudaFree as the VMM calls
 * of one handle of the segment's size, a stream synchronization as a synchronize call. */
Test(models, each_call_is_charged_its_estimated_driver_time)
{
    double va_reserve = gml_cost_call(GMLAKE_DC_VA_RESERVE, 0);
    double va_free = gml_cost_call(GMLAKE_DC_VA_FREE, 0);
    gml_policy *p = make("pytorch", 60 * MiB, NULL, NULL);
    cr_assert_eq(p->device_seconds, 0);
    uint64_t a = A(p, 30 * MiB, 0); /* one cudaMalloc of 30 MiB */
    double expect = va_reserve + gml_cost_grow(30 * MiB, 30 * MiB);
    cr_assert(NEAR(p->device_seconds, expect), "%.9f against %.9f", p->device_seconds, expect);
    F(p, a);
    A(p, 40 * MiB, 0); /* the 30 MiB segment is cudaFree'd, a 40 MiB one cudaMalloc'd */
    expect += gml_cost_shrink(30 * MiB, 30 * MiB) + va_free + va_reserve +
              gml_cost_grow(40 * MiB, 40 * MiB);
    cr_assert(NEAR(p->device_seconds, expect), "%.9f against %.9f", p->device_seconds, expect);
    gml_policy_destroy(p);

    p = make("expandable", 50 * MiB, NULL, NULL);
    a = A(p, 30 * MiB, 0); /* a range, two 20 MiB pages created and mapped, one set_access */
    expect = va_reserve + 2 * gml_cost_grow(20 * MiB, 20 * MiB);
    cr_assert_eq(p->calls[GMLAKE_DC_SET_ACCESS], 1, "one call over both pages");
    cr_assert(NEAR(p->device_seconds, expect), "%.9f against %.9f", p->device_seconds, expect);
    F(p, a);
    A(p, 15 * MiB, 2); /* stream 0's pages unmapped and released, its range freed; a new range */
    expect += gml_cost_call(GMLAKE_DC_SYNCHRONIZE, 0) + 2 * gml_cost_shrink(20 * MiB, 20 * MiB) +
              va_free + va_reserve + gml_cost_grow(20 * MiB, 20 * MiB);
    cr_assert_eq(p->calls[GML_CALL_STREAM_SYNC], 1);
    cr_assert(NEAR(p->device_seconds, expect), "%.9f against %.9f", p->device_seconds, expect);
    gml_policy_destroy(p);
}

/* The replay reports a model's charges of the replay, in total and in the trace's second half. */
Test(models, replay_reports_a_models_device_seconds_by_half)
{
    /* first half: a 30 MiB segment; second half: a 40 MiB one besides it */
    gml_trace t;
    load_trace_text("A 0x1000 31457280 0x0 0\nF 0x1000 0 0x0 1\n"
                    "A 0x2000 31457280 0x0 2\nA 0x3000 41943040 0x0 3\n", &t);
    char err[256];
    gml_policy *p = make("pytorch", GiB, NULL, NULL);
    gml_policy_result r;
    cr_assert_eq(gml_policy_replay(p, &t, 0, NULL, &r, err, sizeof err), 0, "%s", err);
    double seg30 = gml_cost_call(GMLAKE_DC_VA_RESERVE, 0) + gml_cost_grow(30 * MiB, 30 * MiB);
    double seg40 = gml_cost_call(GMLAKE_DC_VA_RESERVE, 0) + gml_cost_grow(40 * MiB, 40 * MiB);
    cr_assert(NEAR(r.device_seconds, seg30 + seg40), "%.9f", r.device_seconds);
    cr_assert(NEAR(r.device_seconds_second_half, seg40), "%.9f", r.device_seconds_second_half);
    gml_policy_destroy(p);
    gml_trace_free(&t);
}

/* Each model's settings are its own: pytorch.* changes only pytorch, expandable.* only
 * expandable (issue 23). */
Test(models, each_models_settings_are_its_own)
{
    /* the same sequence under each model with a setting of its own, of the other model, none */
    const char *names[] = {"pytorch", "expandable"};
    const char *keys[] = {"max_split_size_mb", "roundup_power2_divisions"};
    const char *values[] = {"40", "4"};
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    for (int n = 0; n < 2; n++)
        for (int k = 0; k < 2; k++) {
            uint64_t reserved[3]; /* own setting, the other model's, none */
            for (int v = 0; v < 3; v++) {
                gml_model_options o;
                gml_model_options_default(&o);
                char key[64], err[256] = "";
                snprintf(key, sizeof key, "%s.%s", names[v == 0 ? n : 1 - n], keys[k]);
                if (v < 2)
                    cr_assert_eq(gml_model_option_set(&o, key, values[k], err, sizeof err), 0, "%s", err);
                gml_policy *p = gml_policy_create(names[n], 8 * GiB, &s, &o, err, sizeof err);
                cr_assert_not_null(p, "%s", err);
                uint64_t a = A(p, 50 * MiB, 0);
                F(p, a);
                A(p, 5 * MiB + 1, 0);
                A(p, 14 * MiB + 512 * KiB, 0);
                A(p, 10 * MiB, 0);
                reserved[v] = p->reserved;
                gml_policy_destroy(p);
            }
            cr_assert_eq(reserved[1], reserved[2], "%s.%s changed %s (%llu against %llu)",
                         names[1 - n], keys[k], names[n], (unsigned long long)reserved[1],
                         (unsigned long long)reserved[2]);
            if (n == 0) /* pytorch: each setting changes this sequence */
                cr_assert_neq(reserved[0], reserved[2], "pytorch.%s had no effect", keys[k]);
        }
    /* expandable's own roundup_power2_divisions reaches it (the sequence above is served from
     * the freed 50 MiB whatever the rounding): 5 MiB + 1 and 14.5 MiB fit one 20 MiB page, but
     * rounded with 4 divisions (6 and 16 MiB) they need two; pytorch's setting changes nothing */
    uint64_t reserved[3];
    const char *set[3] = {"expandable.roundup_power2_divisions", "pytorch.roundup_power2_divisions", NULL};
    for (int v = 0; v < 3; v++) {
        gml_policy *p = make("expandable", 8 * GiB, set[v], "4");
        A(p, 5 * MiB + 1, 0);
        A(p, 14 * MiB + 512 * KiB, 0);
        reserved[v] = p->reserved;
        gml_policy_destroy(p);
    }
    cr_assert_eq(reserved[0], 40 * MiB, "expandable.roundup_power2_divisions: %llu", (unsigned long long)reserved[0]);
    cr_assert_eq(reserved[1], 20 * MiB, "pytorch.roundup_power2_divisions changed expandable");
    cr_assert_eq(reserved[2], 20 * MiB);
}

/* A request within 2 MiB (or 512 bytes) of 2^64 cannot be rounded up: it fails, never a 0-byte
 * block (issue 23). */
Test(models, a_size_near_2_to_the_64_fails)
{
    const uint64_t sizes[] = {UINT64_MAX, UINT64_MAX - 100, UINT64_MAX - (1u << 20), (uint64_t)1 << 63,
                              ((uint64_t)1 << 62) + 4096};
    /* gmlake's pool too: out of memory like the models, not "invalid argument" (which stopped
     * its replay and dropped it from the table) */
    const char *names[] = {"pytorch", "expandable", "gmlake"};
    for (int n = 0; n < 3; n++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            for (int div = 0; div < 2; div++) {
                gml_policy *p = make(names[n], 8 * GiB, div ? "pytorch.roundup_power2_divisions" : NULL, "4");
                uint64_t addr = 0;
                cr_assert_eq(p->ops->alloc(p, sizes[i], 0, &addr), GMLAKE_ERR_NOMEM, "%s %llx",
                             names[n], (unsigned long long)sizes[i]);
                cr_assert_eq(p->reserved, 0);
                char why[256];
                cr_assert_eq(p->ops->check(p, why, sizeof why), GMLAKE_OK, "%s", why);
                A(p, MiB, 0);
                gml_policy_destroy(p);
            }
        }
}
