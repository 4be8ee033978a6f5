/* add_plugin.c: an example roifs plugin (see include/roifs/plugin.h): out = in + param.value,
 * cast to the output dtype like numpy's astype after rounding (round half to even, clipped to
 * the range of integer outputs), the same as the builtin `add`.
 *
 *   cc -shared -fPIC -O2 -I/usr/local/include -o libadd_plugin.so add_plugin.c -lm
 *
 *   [process]
 *   plugin = libadd_plugin.so
 *   param.value = 5 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roifs/plugin.h>

struct add_state {
    long double value;
};

static int add_init(const struct roifs_param *params, size_t nparams, void **state, char *err,
                    size_t errlen)
{
    struct add_state *s = malloc(sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return ENOMEM;
    }
    s->value = 1;
    for (size_t i = 0; i < nparams; i++) {
        char *end;
        if (strcmp(params[i].name, "value") != 0) {
            snprintf(err, errlen, "param.%s: unknown parameter (add takes only value)",
                     params[i].name);
            free(s);
            return EINVAL;
        }
        errno = 0;
        s->value = strtold(params[i].value, &end);
        if (end == params[i].value || *end || errno || !isfinite(s->value)) {
            snprintf(err, errlen, "param.value: '%s' is not a number", params[i].value);
            free(s);
            return EINVAL;
        }
    }
    *state = s;
    return 0;
}

enum elem { E_B1, E_U1, E_I1, E_U2, E_I2, E_U4, E_I4, E_U8, E_I8, E_F4, E_F8, E_UNKNOWN };

static enum elem elem_of(const char *typestr)
{
    static const char *const names[] = {"|b1", "|u1", "|i1", "<u2", "<i2", "<u4",
                                        "<i4", "<u8", "<i8", "<f4", "<f8"};
    for (int e = 0; e < E_UNKNOWN; e++)
        if (!strcmp(typestr, names[e]))
            return (enum elem)e;
    return E_UNKNOWN;
}

/* Element i of a typed buffer, as long double (exact for every 64-bit integer). */
static long double load(enum elem e, const void *p, size_t i)
{
    switch (e) {
    case E_B1:
    case E_U1:
        return ((const uint8_t *)p)[i];
    case E_I1:
        return ((const int8_t *)p)[i];
    case E_U2:
        return ((const uint16_t *)p)[i];
    case E_I2:
        return ((const int16_t *)p)[i];
    case E_U4:
        return ((const uint32_t *)p)[i];
    case E_I4:
        return ((const int32_t *)p)[i];
    case E_U8:
        return ((const uint64_t *)p)[i];
    case E_I8:
        return ((const int64_t *)p)[i];
    case E_F4:
        return ((const float *)p)[i];
    case E_F8:
        return ((const double *)p)[i];
    default:
        return 0;
    }
}

/* Integer outputs: round half to even, clip to [lo, hi]; NaN becomes 0. */
static long double to_int(long double v, long double lo, long double hi)
{
    if (isnan(v))
        return 0;
    v = rintl(v);
    return v < lo ? lo : v > hi ? hi : v;
}

static void store(enum elem e, void *p, size_t i, long double v)
{
    switch (e) {
    case E_B1:
        ((uint8_t *)p)[i] = v != 0;
        break;
    case E_U1:
        ((uint8_t *)p)[i] = (uint8_t)to_int(v, 0, UINT8_MAX);
        break;
    case E_I1:
        ((int8_t *)p)[i] = (int8_t)to_int(v, INT8_MIN, INT8_MAX);
        break;
    case E_U2:
        ((uint16_t *)p)[i] = (uint16_t)to_int(v, 0, UINT16_MAX);
        break;
    case E_I2:
        ((int16_t *)p)[i] = (int16_t)to_int(v, INT16_MIN, INT16_MAX);
        break;
    case E_U4:
        ((uint32_t *)p)[i] = (uint32_t)to_int(v, 0, UINT32_MAX);
        break;
    case E_I4:
        ((int32_t *)p)[i] = (int32_t)to_int(v, INT32_MIN, INT32_MAX);
        break;
    case E_U8:
        ((uint64_t *)p)[i] = (uint64_t)to_int(v, 0, (long double)UINT64_MAX);
        break;
    case E_I8:
        ((int64_t *)p)[i] = (int64_t)to_int(v, (long double)INT64_MIN, (long double)INT64_MAX);
        break;
    case E_F4:
        ((float *)p)[i] = (float)v;
        break;
    case E_F8:
        ((double *)p)[i] = (double)v;
        break;
    default:
        break;
    }
}

static int add_process(void *state, const struct roifs_roi *roi, const void *in, void *out,
                       char *err, size_t errlen)
{
    const struct add_state *s = state;
    enum elem from = elem_of(roi->in_dtype), to = elem_of(roi->out_dtype);
    if (from == E_UNKNOWN || to == E_UNKNOWN) {
        snprintf(err, errlen, "dtype %s -> %s is not supported", roi->in_dtype, roi->out_dtype);
        return 1;
    }
    for (size_t i = 0; i < roi->nelems; i++)
        store(to, out, i, load(from, in, i) + s->value);
    return 0;
}

static void add_fini(void *state)
{
    free(state);
}

static const struct roifs_plugin add_plugin = {
    .abi = ROIFS_PLUGIN_ABI,
    .name = "add",
    .init = add_init,
    .process = add_process,
    .fini = add_fini,
};

const struct roifs_plugin *roifs_plugin(void)
{
    return &add_plugin;
}
