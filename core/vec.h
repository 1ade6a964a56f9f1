/*
 * vec.h — the one growable array of gmlake: GML_VEC(T) is { T *v; size_t n, cap; }.
 * gml_vec_push appends (doubling, from 64), false on host out of memory with the array unchanged;
 * gml_vec_free releases the storage and empties the array.  Zero-initialised is empty.
 */
#ifndef GML_VEC_H
#define GML_VEC_H

#include <stdbool.h>
#include <stdlib.h>

#define GML_VEC(T)                                                                                \
    struct {                                                                                      \
        T *v;                                                                                     \
        size_t n, cap;                                                                            \
    }

/* Makes room for one more element of `elem` bytes in *v (capacity *cap, n used). */
static inline bool gml_vec_room_(void **v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 64;
    void *a = realloc(*v, nc * elem);
    if (!a)
        return false;
    *v = a;
    *cap = nc;
    return true;
}

#define gml_vec_push(a, x)                                                                        \
    (gml_vec_room_((void **)&(a)->v, &(a)->cap, (a)->n, sizeof *(a)->v) &&                        \
     ((a)->v[(a)->n++] = (x), true))

#define gml_vec_free(a)                                                                           \
    do {                                                                                          \
        free((a)->v);                                                                             \
        (a)->v = NULL;                                                                            \
        (a)->n = (a)->cap = 0;                                                                    \
    } while (0)

#endif /* GML_VEC_H */
