/* fuzz_config.c — libFuzzer target for the configuration parser: any bytes as a file's content
 * must give messages, never a crash, a hang or an out-of-range setting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "stitch/stitch.h" /* the strategy enum only */

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    gml_config c;
    gml_config_defaults(&c);
    gml_config_report rep = {0};
    gml_config_apply_text(&c, &rep, (const char *)data, size, "fuzz", devnull);
    if (c.pool.reuse_limit < 1 || c.pool.reuse_limit > 64 || c.pool.defrag_level < 0 ||
        c.pool.defrag_level > 2 || (unsigned)c.pool.strategy >= GML_STITCH_STRATEGY_COUNT ||
        c.log_level < 0 || c.log_level > GML_LOG_DEBUG || c.pool.chunk_size < (2u << 20))
        abort(); /* a value outside its table range got in */
    char why[2048];
    if (rep.errors == 0 && gml_config_check(&c, 0, why, sizeof why) != 0 && !strstr(why, "chunk_size") &&
        !strstr(why, "small_limit"))
        abort(); /* the parser let in a value the shared validation refuses on its own */
    return 0;
}
