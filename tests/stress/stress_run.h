/* stress_run.h — run `threads` workers doing `ops` random allocations and frees each on `pool`
 * (which must be on a backed sim device: the workers write tags into their blocks and verify them
 * before each free, and run the pool checker now and then).  Returns the number of errors seen:
 * tag mismatches, failed frees, check failures; -1 if a thread could not start. */
#ifndef GML_STRESS_RUN_H
#define GML_STRESS_RUN_H

#include "stitch/pool.h"

int gml_stress_run(gml_pool *pool, int threads, int ops);

#endif
