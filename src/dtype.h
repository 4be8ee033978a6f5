/* dtype.h: numeric element types (numpy typestr / Zarr v3 names), byte order and casting.
 * In memory roifs always keeps elements in native (little-endian) byte order; big-endian
 * storage is converted when a chunk is decoded or encoded. */
#ifndef ROIFS_DTYPE_H
#define ROIFS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

enum dtype_kind { DT_BOOL, DT_INT, DT_UINT, DT_FLOAT };

struct dtype {
    enum dtype_kind kind;
    unsigned size;   /* bytes per element: 1, 2, 4 or 8 (float: 2, 4, 8) */
    bool big_endian; /* byte order in storage; always false for size 1 */
};

/* Parses a numpy typestr ("<u2", "|b1", ">f8", "<i8", "|u1", "<f2") or a Zarr v3 core name
 * ("uint16", "bool", "float32"). Endianness is required for multi-byte typestrs; v3 names
 * are little-endian. Returns 0 or -EINVAL (message in err). */
int dtype_parse(const char *text, struct dtype *out, struct errbuf *err);

/* numpy typestr of dt ("<u2", "|u1", ">f8"); buf must hold 8 bytes. */
const char *dtype_typestr(const struct dtype *dt, char buf[8]);
/* The same with little-endian byte order (what processors receive). */
const char *dtype_typestr_le(const struct dtype *dt, char buf[8]);
/* Zarr v3 data_type name ("uint16"). */
const char *dtype_v3_name(const struct dtype *dt);
bool dtype_equal_ignoring_order(const struct dtype *a, const struct dtype *b);

/* Reverses the bytes of each of n elements of the given size in place (size 1: no-op). */
void dtype_byteswap(void *buf, size_t n, unsigned size);

/* Bulk conversions between native-order elements of dt and double / long double.
 * from_*: numpy-style cast: integers get round-half-to-even, then clipping to the type's
 * range (NaN becomes 0); bool becomes value != 0; float16 via IEEE rounding. */
void dtype_to_double(const struct dtype *dt, const void *src, double *dst, size_t n);
void dtype_from_double(const struct dtype *dt, const double *src, void *dst, size_t n);
void dtype_to_ldouble(const struct dtype *dt, const void *src, long double *dst, size_t n);
void dtype_from_ldouble(const struct dtype *dt, const long double *src, void *dst, size_t n);

/* Integer conversions for the builtins' integer fast path. to_int64: bool, int and uint of up
 * to 32 bits (false for other types, nothing converted), exact. from_int64: saturates to the
 * range of an int or uint type (bool: value != 0); false for floats (nothing stored). Both
 * give what the double conversions give for the same exact integer values. */
bool dtype_to_int64(const struct dtype *dt, const void *src, int64_t *dst, size_t n);
bool dtype_from_int64(const struct dtype *dt, const int64_t *src, void *dst, size_t n);

/* The integer of size bytes (1, 2, 4 or 8; native order) at p, zero-extended: its bits. */
static inline uint64_t dtype_load_bits(const void *p, unsigned size)
{
    switch (size) {
    case 1:
        return *(const uint8_t *)p;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* The low size bytes of bits (as dtype_load_bits gives them) as a signed integer. */
static inline int64_t dtype_sign_extend(uint64_t bits, unsigned size)
{
    if (size >= 8)
        return (int64_t)bits;
    uint64_t sign = 1ULL << (8 * size - 1);
    return (int64_t)((bits ^ sign) - sign);
}

/* Stores the low size bytes (1, 2, 4 or 8) of v at p, in native order. */
static inline void dtype_store_bits(void *p, unsigned size, uint64_t v)
{
    switch (size) {
    case 1:
        *(uint8_t *)p = (uint8_t)v;
        break;
    case 2: {
        uint16_t x = (uint16_t)v;
        memcpy(p, &x, 2);
        break;
    }
    case 4: {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    default:
        memcpy(p, &v, 8);
        break;
    }
}

/* Parses a fill value given as text in a config file ("0", "-3", "1.5", "nan", "inf",
 * "-inf", "true", "false") into one native-order element. 0 or -EINVAL / -ERANGE. */
int dtype_parse_value(const struct dtype *dt, const char *text, void *out, struct errbuf *err);

/* float16 <-> float helpers (IEEE 754 binary16, round to nearest even). */
float dtype_half_to_float(uint16_t h);
uint16_t dtype_float_to_half(float f);

#endif
