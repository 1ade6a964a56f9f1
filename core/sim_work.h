/*
 * sim_work.h — the simulated device's GPU work (part of the sim, device_sim.c): streams of work
 * units, events recorded on them, and GPU-side waits between streams.
 *
 * Contract
 *  - A stream (keyed by its gml_stream) has units of work submitted (sim_work_launch, and one per
 *    GPU-side wait) and completed (sim_work_finish*, or an event synchronised); a stream is made on
 *    its first use.  Tests and the replay's GPU model complete work; nothing completes by itself.
 *  - An event recorded on a stream stands for the units that stream had submitted at the record;
 *    it is done once those have completed, together with the work of every stream they waited for
 *    (sim_work_wait), transitively.  An event never recorded, or recorded on a stream with no work
 *    launched, is done at once; in manual mode (sim_work.manual) an event is done only once a
 *    test completed it (sim_work_complete_all) or a host wait on it (sim_work_sync) did.
 *  - A wait (sim_work_wait) on an event not yet done adds a unit to the waiting stream, after which
 *    its work runs only once the event's work has: completing the waiting stream's work beyond
 *    that unit completes the event's work too.
 *  - No lock: the caller (device_sim.c) holds its own around every call.  Functions that allocate
 *    fail on host out of memory as said, changing nothing they cannot finish.
 */
#ifndef GML_SIM_WORK_H
#define GML_SIM_WORK_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "vec.h"

typedef struct sim_stream sim_stream;

typedef struct sim_event {
    bool done;         /* manual mode: completed by sim_work_complete_all or a host wait */
    sim_stream *s;     /* the stream recorded on, NULL before the first record */
    uint64_t target;   /* its units submitted at the record */
    struct sim_event *next, *prev;
} sim_event;

typedef struct sim_work {
    sim_event *events;
    sim_stream *streams; /* uthash table by key */
    bool manual;
    /* propagate()'s scratch: the streams it reached and its work list */
    uint64_t prop_gen;
    GML_VEC(sim_stream *) reach, work;
} sim_work;

/* Frees every event and stream; the work is empty again. */
void sim_work_free(sim_work *w);

/* A new event, done (as never recorded); NULL on host out of memory. */
sim_event *sim_work_event_new(sim_work *w);
void sim_work_event_free(sim_work *w, sim_event *e);
/* Records e on stream key: the units it has submitted (none where no work was launched on it). */
void sim_work_record(sim_work *w, sim_event *e, gml_stream key);
/* Whether e is done (see the contract). */
bool sim_work_done(sim_work *w, const sim_event *e);
/* A host wait on e: its work, and what that waited for, completes; e is done. */
void sim_work_sync(sim_work *w, sim_event *e);
/* Stream key waits on the GPU for e: false on host out of memory. */
bool sim_work_wait(sim_work *w, gml_stream key, const sim_event *e);
/* Every stream's work completes and every event is done. */
void sim_work_complete_all(sim_work *w);

/* One more unit of work on stream key: false on host out of memory. */
bool sim_work_launch(sim_work *w, gml_stream key);
/* Stream key's work completes: all of it, or up to unit `unit` (with what that waited for). */
void sim_work_finish(sim_work *w, gml_stream key);
void sim_work_finish_to(sim_work *w, gml_stream key, uint64_t unit);
/* The units submitted on stream key so far (0 for a stream never used). */
uint64_t sim_work_submitted(sim_work *w, gml_stream key);
/* Whether unit `unit` of stream s_key has completed or, unless `now`, will have completed before
 * the next work of stream `next` runs (through the GPU-side waits next made, directly or through
 * other streams'). */
bool sim_work_ordered(sim_work *w, gml_stream s_key, uint64_t unit, gml_stream next, bool now);

#endif /* GML_SIM_WORK_H */
