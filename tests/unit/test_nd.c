/* test_nd.c: unit tests of nd.c: strided copies and fills against element-wise references,
 * transposes (the Fortran-order reorder among them), C-order iteration and chunk boxes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nd.h"
#include "util.h"

static uint64_t rnd_state = 0x12345678;
static uint64_t rnd(uint64_t n)
{
    uint64_t v = check_xorshift(&rnd_state);
    return n ? v % n : 0;
}

/* Element-wise reference for nd_copy. */
static void naive_copy(char *dst, const uint64_t *dsh, const uint64_t *doff, const char *src,
                       const uint64_t *ssh, const uint64_t *soff, const uint64_t *shape, int nd,
                       size_t is)
{
    uint64_t n = nd_prod(shape, nd), idx[8];
    for (uint64_t e = 0; e < n; e++) {
        nd_unlinear(e, shape, nd, idx);
        uint64_t si[8], di[8];
        for (int d = 0; d < nd; d++) {
            si[d] = idx[d] + soff[d];
            di[d] = idx[d] + doff[d];
        }
        memcpy(dst + nd_linear(di, dsh, nd) * is, src + nd_linear(si, ssh, nd) * is, is);
    }
}

static void test_nd_copy_random(void)
{
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        int nd = 1 + (int)rnd(4);
        size_t is = (size_t)1 << rnd(4);
        uint64_t ssh[4], dsh[4], soff[4], doff[4], shape[4];
        for (int d = 0; d < nd; d++) {
            shape[d] = rnd(5) == 0 ? 0 : 1 + rnd(6);
            ssh[d] = shape[d] + (rnd(2) ? 0 : rnd(4));
            dsh[d] = shape[d] + (rnd(2) ? 0 : rnd(4));
            soff[d] = rnd(ssh[d] - shape[d] + 1);
            doff[d] = rnd(dsh[d] - shape[d] + 1);
        }
        size_t sn = (size_t)nd_prod(ssh, nd) * is, dn = (size_t)nd_prod(dsh, nd) * is;
        char *src = malloc(sn + 1), *a = malloc(dn + 1), *b = malloc(dn + 1);
        for (size_t i = 0; i < sn; i++)
            src[i] = (char)rnd(256);
        for (size_t i = 0; i < dn; i++)
            a[i] = b[i] = (char)rnd(256);
        nd_copy(a, dsh, doff, src, ssh, soff, shape, nd, is);
        naive_copy(b, dsh, doff, src, ssh, soff, shape, nd, is);
        if (memcmp(a, b, dn) != 0)
            bad++;
        /* nd_fill_box against the same reference with a constant source */
        uint64_t v = rnd(UINT64_MAX);
        char *one = malloc(sn + 8);
        nd_fill(one, (size_t)nd_prod(ssh, nd), &v, is);
        nd_fill_box(a, dsh, doff, shape, nd, &v, is);
        naive_copy(b, dsh, doff, one, ssh, soff, shape, nd, is);
        if (memcmp(a, b, dn) != 0)
            bad++;
        free(one);
        free(src);
        free(a);
        free(b);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_nd_edge_cases(void)
{
    /* ndim 0: one element */
    uint32_t s = 0xdeadbeef, d = 0;
    nd_copy(&d, NULL, NULL, &s, NULL, NULL, NULL, 0, 4);
    CHECK(d == 0xdeadbeef);
    CHECK_EQ_INT(nd_prod(NULL, 0), 1);
    /* 32 dimensions of extent 1 or 2 */
    uint64_t sh[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM] = {0}, box[ROIFS_MAX_DIM];
    for (int i = 0; i < ROIFS_MAX_DIM; i++)
        sh[i] = box[i] = i >= 28 ? 2 : 1;
    uint8_t src[16], dst[16] = {0};
    for (int i = 0; i < 16; i++)
        src[i] = (uint8_t)(i + 1);
    nd_copy(dst, sh, off, src, sh, off, box, ROIFS_MAX_DIM, 1);
    CHECK(memcmp(src, dst, 16) == 0);
    box[31] = 1;
    off[31] = 1;
    memset(dst, 0, sizeof dst);
    nd_copy(dst, sh, off, src, sh, off, box, ROIFS_MAX_DIM, 1);
    CHECK(dst[0] == 0 && dst[1] == 2 && dst[3] == 4 && dst[15] == 16 && dst[14] == 0);
    /* intersect, linear and back */
    uint64_t a0[] = {0, 5}, a1[] = {10, 10}, b0[] = {3, 9}, b1[] = {4, 20}, o0[2], o1[2];
    CHECK(nd_intersect(a0, a1, b0, b1, o0, o1, 2));
    CHECK(o0[0] == 3 && o1[0] == 4 && o0[1] == 9 && o1[1] == 10);
    uint64_t c0[] = {10, 0};
    CHECK(!nd_intersect(a0, a1, c0, b1, o0, o1, 2));
    uint64_t grid[] = {3, 4, 5}, idx[] = {2, 1, 3}, back[3];
    CHECK_EQ_INT(nd_linear(idx, grid, 3), 2 * 20 + 1 * 5 + 3);
    nd_unlinear(48, grid, 3, back);
    CHECK(back[0] == 2 && back[1] == 1 && back[2] == 3);
    /* fill with a pattern that is not one repeated byte */
    uint16_t buf[7], pat = 0x1234;
    nd_fill(buf, 7, &pat, 2);
    int ok = 1;
    for (int i = 0; i < 7; i++)
        ok &= buf[i] == 0x1234;
    CHECK(ok);
}

/* The Fortran-order reorder zarr_decode_chunk does: a Fortran-order array is the C-order
 * transpose with the dimensions reversed. */
static void f_to_c(void *c, void *f, const uint64_t *sh, int nd, size_t is)
{
    uint8_t order[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++)
        order[d] = (uint8_t)(nd - 1 - d);
    nd_transpose(c, f, sh, order, nd, is, false);
}

static void test_nd_f_to_c(void)
{
    for (int iter = 0; iter < 200; iter++) {
        int nd = 1 + (int)rnd(4);
        size_t is = iter % 5 == 4 ? 3 : (size_t)1 << rnd(4);
        uint64_t sh[4], n = 1;
        for (int d = 0; d < nd; d++)
            n *= sh[d] = 1 + rnd(5);
        char *f = malloc(n * is), *c = malloc(n * is), *ref = malloc(n * is);
        for (uint64_t i = 0; i < n * is; i++)
            f[i] = (char)rnd(256);
        /* reference: element at C index idx sits at Fortran offset sum idx[d] * prod(sh[:d]) */
        for (uint64_t e = 0; e < n; e++) {
            uint64_t idx[4], fo = 0, st = 1;
            nd_unlinear(e, sh, nd, idx);
            for (int d = 0; d < nd; d++) {
                fo += idx[d] * st;
                st *= sh[d];
            }
            memcpy(ref + e * is, f + fo * is, is);
        }
        f_to_c(c, f, sh, nd, is);
        CHECK(memcmp(c, ref, n * is) == 0);
        free(f);
        free(c);
        free(ref);
    }
    /* a fixed 2x3 case: F bytes 0 1 2 3 4 5 hold a[0,0] a[1,0] a[0,1] a[1,1] a[0,2] a[1,2] */
    uint8_t f[] = {0, 1, 2, 3, 4, 5}, c[6], want[] = {0, 2, 4, 1, 3, 5};
    uint64_t sh[] = {2, 3};
    f_to_c(c, f, sh, 2, 1);
    CHECK(memcmp(c, want, 6) == 0);
}

/* Any permutation, both ways, against the definition b[j] = a[i] with j_d = i_order[d]. */
static void test_nd_transpose(void)
{
    int bad = 0;
    for (int iter = 0; iter < 300; iter++) {
        int nd = 1 + (int)rnd(4);
        size_t is = (size_t)1 << rnd(4);
        uint64_t ash[4], bsh[4], n = 1;
        uint8_t order[4] = {0, 1, 2, 3};
        for (int d = 0; d < nd; d++)
            n *= ash[d] = rnd(6) == 0 ? 0 : 1 + rnd(4);
        for (int d = nd - 1; d > 0; d--) {
            int j = (int)rnd((uint64_t)d + 1);
            uint8_t t = order[d];
            order[d] = order[j];
            order[j] = t;
        }
        for (int d = 0; d < nd; d++)
            bsh[d] = ash[order[d]];
        char *a = malloc(n * is + 1), *b = malloc(n * is + 1), *ref = malloc(n * is + 1);
        char *back = malloc(n * is + 1);
        for (uint64_t i = 0; i < n * is; i++)
            a[i] = (char)rnd(256);
        for (uint64_t e = 0; e < n; e++) {
            uint64_t ai[4], bi[4];
            nd_unlinear(e, ash, nd, ai);
            for (int d = 0; d < nd; d++)
                bi[d] = ai[order[d]];
            memcpy(ref + nd_linear(bi, bsh, nd) * is, a + e * is, is);
        }
        nd_transpose(a, b, ash, order, nd, is, true);
        bad += memcmp(b, ref, n * is) != 0;
        nd_transpose(back, b, ash, order, nd, is, false);
        bad += memcmp(back, a, n * is) != 0;
        free(a);
        free(b);
        free(ref);
        free(back);
    }
    CHECK_EQ_INT(bad, 0);
    /* 0-d: one element either way */
    uint16_t x = 0xbeef, y = 0;
    nd_transpose(&x, &y, NULL, NULL, 0, 2, true);
    CHECK(y == 0xbeef);
}

/* nd_next_index visits every position of a box once, in C order, and ends back at lo. */
static void test_nd_next_index(void)
{
    uint64_t lo[] = {1, 0, 2}, hi[] = {3, 2, 5}, idx[3] = {1, 0, 2}, n = 0;
    int in_order = 1;
    do {
        uint64_t want[3], rel = n;
        want[2] = lo[2] + rel % 3;
        rel /= 3;
        want[1] = lo[1] + rel % 2;
        want[0] = lo[0] + rel / 2;
        in_order &= memcmp(idx, want, sizeof want) == 0;
        n++;
    } while (nd_next_index(idx, lo, hi, 3) && n < 100);
    CHECK_EQ_INT(n, 2 * 2 * 3);
    CHECK(in_order);
    CHECK(idx[0] == 1 && idx[1] == 0 && idx[2] == 2);
    /* lo NULL counts from zero; ndim 0 has one position */
    uint64_t g[] = {2, 3}, j[2] = {0, 0};
    n = 0;
    do
        n++;
    while (nd_next_index(j, NULL, g, 2));
    CHECK_EQ_INT(n, 6);
    CHECK(!nd_next_index(j, NULL, g, 0));
}

/* Chunk boxes are clipped at the array's edge; chunk ranges cover a box exactly. */
static void test_nd_chunk_box_and_range(void)
{
    uint64_t shape[] = {10, 7}, chunks[] = {4, 7}, lo[2], hi[2];
    uint64_t i0[] = {0, 0}, i2[] = {2, 0};
    nd_chunk_box(i0, chunks, shape, 2, lo, hi);
    CHECK(lo[0] == 0 && hi[0] == 4 && lo[1] == 0 && hi[1] == 7);
    nd_chunk_box(i2, chunks, shape, 2, lo, hi);
    CHECK(lo[0] == 8 && hi[0] == 10 && lo[1] == 0 && hi[1] == 7);
    uint64_t a[] = {3, 0}, b[] = {9, 7}, c0[2], c1[2];
    nd_chunk_range(a, b, chunks, 2, c0, c1);
    CHECK(c0[0] == 0 && c1[0] == 3 && c0[1] == 0 && c1[1] == 1);
    uint64_t a2[] = {4, 0}, b2[] = {8, 1};
    nd_chunk_range(a2, b2, chunks, 2, c0, c1);
    CHECK(c0[0] == 1 && c1[0] == 2 && c0[1] == 0 && c1[1] == 1);
}

int main(void)
{
    RUN(test_nd_copy_random);
    RUN(test_nd_edge_cases);
    RUN(test_nd_f_to_c);
    RUN(test_nd_transpose);
    RUN(test_nd_next_index);
    RUN(test_nd_chunk_box_and_range);
    return check_done();
}
