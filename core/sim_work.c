/* sim_work.c — the simulated device's GPU work: streams, events, GPU-side waits (contract in
 * sim_work.h). */
#include "sim_work.h"

#include <stdlib.h>
#include <uthash.h>

#include "gmlake.h"

/* A stream_wait: the stream's work from unit `unit` on runs after src's work up to src_target. */
typedef struct sim_gate {
    uint64_t unit;
    sim_stream *src;
    uint64_t src_target;
} sim_gate;

/* A stream's simulated work: units submitted (sim_work_launch) and completed. */
struct sim_stream {
    gml_stream key;
    uint64_t submitted, completed;
    uint64_t need;   /* propagate()'s answer for this stream, valid when need_gen is current */
    uint64_t need_gen;
    sim_gate *gates; /* in unit order */
    size_t ngates, cap;
    UT_hash_handle hh;
};

void sim_work_free(sim_work *w)
{
    while (w->events) {
        sim_event *e = w->events;
        w->events = e->next;
        free(e);
    }
    sim_stream *st, *stt;
    HASH_ITER(hh, w->streams, st, stt) {
        HASH_DEL(w->streams, st);
        free(st->gates);
        free(st);
    }
    gml_vec_free(&w->reach);
    gml_vec_free(&w->work);
}

sim_event *sim_work_event_new(sim_work *w)
{
    sim_event *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->done = true;
    e->next = w->events;
    if (w->events)
        w->events->prev = e;
    w->events = e;
    return e;
}

void sim_work_event_free(sim_work *w, sim_event *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        w->events = e->next;
    if (e->next)
        e->next->prev = e->prev;
    free(e);
}

/* The stream of key k (created on first use), NULL on host OOM. */
static sim_stream *stream_of(sim_work *w, gml_stream k)
{
    sim_stream *st = NULL;
    HASH_FIND(hh, w->streams, &k, sizeof k, st);
    if (!st && (st = calloc(1, sizeof *st))) {
        st->key = k;
        HASH_ADD(hh, w->streams, key, sizeof st->key, st);
    }
    return st;
}

void sim_work_record(sim_work *w, sim_event *e, gml_stream key)
{
    /* a stream that no work was launched on has none to wait for: no record of it is made (a
     * record per stream made a table as large as the streams of a stream-per-request replay) */
    sim_stream *st = e->s && e->s->key == key ? e->s : NULL; /* recorded there before */
    if (!st)
        HASH_FIND(hh, w->streams, &key, sizeof key, st);
    e->done = !w->manual;
    e->s = st;
    e->target = st ? st->submitted : 0;
}

/* Finds the streams whose work st's work up to `target` runs after, through the GPU-side waits
 * (stream_wait) before it, theirs, and so on: each one's `need` (the unit of its work) in
 * w->reach, st first.  A work list to a fixed point, touching only the streams the
 * waits name (a wait names work already submitted, so it ends).  False on host out of memory. */
static bool propagate(sim_work *w, sim_stream *st, uint64_t target)
{
    uint64_t gen = ++w->prop_gen;
    w->reach.n = w->work.n = 0;
    st->need = target;
    st->need_gen = gen;
    if (!gml_vec_push(&w->reach, st) || !gml_vec_push(&w->work, st))
        return false;
    while (w->work.n) {
        sim_stream *t = w->work.v[--w->work.n];
        for (size_t i = 0; i < t->ngates && t->gates[i].unit <= t->need; i++) {
            sim_stream *src = t->gates[i].src;
            if (src->need_gen != gen) {
                src->need_gen = gen;
                src->need = 0;
                if (!gml_vec_push(&w->reach, src))
                    return false;
            }
            if (src->need < t->gates[i].src_target) {
                src->need = t->gates[i].src_target;
                if (!gml_vec_push(&w->work, src))
                    return false;
            }
        }
    }
    return true;
}

/* Whether st's work up to `target` has completed: its own units, and the work of the streams it
 * waited for before then (stream_wait). */
static bool reached(sim_work *w, sim_stream *st, uint64_t target)
{
    if (st->completed < target || !propagate(w, st, target))
        return false;
    for (size_t i = 0; i < w->reach.n; i++)
        if (w->reach.v[i]->completed < w->reach.v[i]->need)
            return false;
    return true;
}

/* Completes st's work up to target, and what it waited for. */
static void complete_to(sim_work *w, sim_stream *st, uint64_t target)
{
    if (st->completed < target)
        st->completed = target;
    if (!propagate(w, st, target))
        return; /* host out of memory: what it waited for stays as it was */
    for (size_t i = 0; i < w->reach.n; i++)
        if (w->reach.v[i]->completed < w->reach.v[i]->need)
            w->reach.v[i]->completed = w->reach.v[i]->need;
}

bool sim_work_done(sim_work *w, const sim_event *e)
{
    return e->done && (!e->s || reached(w, e->s, e->target));
}

void sim_work_sync(sim_work *w, sim_event *e)
{
    e->done = true; /* waiting lets the simulated work finish */
    if (e->s)
        complete_to(w, e->s, e->target);
}

bool sim_work_wait(sim_work *w, gml_stream key, const sim_event *e)
{
    if (!e->s || reached(w, e->s, e->target))
        return true;
    sim_stream *st = stream_of(w, key);
    if (!st || (st->ngates == st->cap &&
                !(st->gates = realloc(st->gates, (st->cap = st->cap ? 2 * st->cap : 4) * sizeof *st->gates))))
        return false; /* host out of memory: the test run is lost anyway */
    st->submitted++; /* the wait is work of its own on the stream */
    st->gates[st->ngates++] = (sim_gate){st->submitted, e->s, e->target};
    return true;
}

void sim_work_complete_all(sim_work *w)
{
    for (sim_event *e = w->events; e; e = e->next)
        e->done = true;
    for (sim_stream *st = w->streams; st; st = st->hh.next)
        st->completed = st->submitted;
}

bool sim_work_launch(sim_work *w, gml_stream key)
{
    sim_stream *st = stream_of(w, key);
    if (st)
        st->submitted++;
    return st != NULL;
}

void sim_work_finish(sim_work *w, gml_stream key)
{
    sim_stream *st = stream_of(w, key);
    if (st)
        st->completed = st->submitted;
}

void sim_work_finish_to(sim_work *w, gml_stream key, uint64_t unit)
{
    sim_stream *st = stream_of(w, key);
    if (st)
        complete_to(w, st, unit < st->submitted ? unit : st->submitted);
}

uint64_t sim_work_submitted(sim_work *w, gml_stream key)
{
    sim_stream *st = stream_of(w, key);
    return st ? st->submitted : 0;
}

bool sim_work_ordered(sim_work *w, gml_stream s_key, uint64_t unit, gml_stream next, bool now)
{
    sim_stream *st = stream_of(w, s_key), *nx = stream_of(w, next);
    bool ok = st && reached(w, st, unit);
    if (!ok && !now && st && nx && propagate(w, nx, UINT64_MAX)) /* after all next waited for */
        ok = st->need_gen == w->prop_gen && st->need >= unit;
    return ok;
}
