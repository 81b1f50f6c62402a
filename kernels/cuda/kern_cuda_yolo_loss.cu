/*
 * The whole YOLOv5 loss (ComputeLoss), CUDA: build_targets, fused CIoU forward and backward,
 * objectness and class BCE, deterministic reductions; the twin of kernels/ref/kern_yolo_loss.c
 * (kern.h "The whole YOLOv5 loss", kern_cuda.h).
 *
 * Tensors (device memory): p[l], dp[l] (bs, na, ny_l, nx_l, no) float32, no = nc + 5; targets
 * (max_targets, 6); nt one int; out KERN_YOLO_OUT_N floats. dp[l] is overwritten (every element)
 * or, with KERN_ACCUM_DX, added to. Nothing comes back to the host: five kernels and one CUB
 * radix sort on the context's stream, no allocation, no sync (graph-capturable).
 *
 * SLOTS. Level l has cap = 5 na max_targets slots, slot s = (o na + a) max_targets + t for offset
 * o, anchor a, target row t: the reference's entry order is slot order, with the slots that
 * build_targets rejects left out. Global slot g = l cap + s.
 *   1. yl_init: winner[cell] = -1; reads *nt (a bad count becomes 0 and a status bit).
 *   2. yl_build (blocks x levels): one thread per slot: anchor filter, offsets, clamped cell,
 *      tbox, the prediction's box and its CIoU (stored); key = the slot's global cell (or the
 *      sentinel `cells` for a rejected slot); atomicMax(winner[cell], g): the LAST entry wins the
 *      objectness target, as in the reference; per-block partial sums of the entry count,
 *      1 - CIoU and the class BCE.
 *   3. yl_obj (blocks x levels): objectness BCE over every cell (tobj from the winner's CIoU),
 *      partial sums; writes dp's objectness column (and zeroes the rest when overwriting).
 *   4. yl_final (one block): sums the partials of each level in a fixed order (double), writes
 *      out and the per-level gradient scales of the box and class terms.
 *   5. cub::DeviceRadixSort (stable) orders the slots by cell; yl_grad: the first thread of each
 *      cell's run walks it in slot order, computing each entry's CIoU gradient and adding it and
 *      the class gradient to the cell's row: the reference's additions in the reference's order,
 *      no float atomics.
 * RAW16 (kern_loss.h): p and dp are the bf16 executor's Detect outputs, NCHW or NHWC, read and
 * written in place (yl_row_of, yl_get): yl_obj writes every element of dp, rounded; yl_grad adds
 * a cell's entries in float32, in slot order, into registers and stores each sum rounded once,
 * the same float additions as the float32 path's into its zeroed dp.
 * Every sum has a fixed shape (YL_PARTS partials per level, one block for the total), so results
 * are bitwise reproducible run to run; against the reference they differ by expf/atanf/FMA
 * rounding and the order of the double sums.
 *
 * SCRATCH (device, aligned to 256 inside): header (status, effective nt), keys and values in and
 * out (4 x nl cap ints), class, tbox, pbox, CIoU per slot, winner per cell, the partials, the
 * level scales, and CUB's temporary storage.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "kern_ciou_common.h"
#include "kern_cuda_internal.h"
#include "kern_lowp_common.h"

#define YL_PARTS 128 /* partial sums per level: blocks of yl_build and yl_obj along x */

struct yl_hdr {
    int status; /* KERN_YOLO_BAD_* bits of this call */
    int nt;     /* the count in use: *nt, or 0 when it was out of range */
};

/* Everything the kernels take, by value (about 1.5 KB of the 4 KB of parameters). */
struct yl_args {
    kern_yolo_loss d;
    const float *p[KERN_YOLO_MAX_LEVELS];
    float *dp[KERN_YOLO_MAX_LEVELS];
    int cell_off[KERN_YOLO_MAX_LEVELS + 1]; /* first global cell of each level; [nl] = total */
    float obj_scale[KERN_YOLO_MAX_LEVELS];  /* objectness gradient scale, as the reference's */
    int cap;                                /* slots per level */
    int add;                                /* KERN_ACCUM_DX given */
    int raw16, nhwc;                        /* RAW16: p, dp bf16 (cast), NHWC or NCHW */
    const float *targets;
    const int *nt;
    float *out;
    /* scratch views */
    yl_hdr *hdr;
    unsigned *key_in, *key_out;
    int *val_in, *val_out;
    int *cls;
    float *tbox, *pbox, *ciou;
    int *winner;
    double *part;  /* (nl, YL_PARTS, 4): count, sum 1 - CIoU, class BCE, objectness BCE */
    float *scales; /* (2, KERN_YOLO_MAX_LEVELS): box and class gradient scale per level */
};

/* Byte offsets of the scratch arrays from a 256-aligned base. */
struct yl_layout {
    size_t hdr, key_in, key_out, val_in, val_out, cls, tbox, pbox, ciou, winner, part, scales, temp,
        temp_bytes, total;
};

static size_t yl_r256(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

static int yl_sort_bits(int cells)
{
    int bits = 1;
    while (bits < 31 && ((unsigned)cells >> bits) != 0)
        bits++;
    return bits;
}

static int yl_plan(const kern_yolo_loss *d, yl_layout *L)
{
    const size_t cap = (size_t)KERN_YOLO_OFFSETS * (size_t)d->na * (size_t)d->max_targets;
    const size_t S = cap * (size_t)d->nl;
    size_t cells = 0;
    for (int l = 0; l < d->nl; l++)
        cells += (size_t)d->bs * (size_t)d->na * (size_t)d->ny[l] * (size_t)d->nx[l];
    size_t temp = 0;
    const cudaError_t e = cub::DeviceRadixSort::SortPairs(
        (void *)NULL, temp, (const unsigned *)NULL, (unsigned *)NULL, (const int *)NULL,
        (int *)NULL, (int)S, 0, yl_sort_bits((int)cells), (cudaStream_t)0);
    if (e != cudaSuccess) return -EIO;
    size_t off = 0;
    L->hdr = off;
    off += yl_r256(sizeof(yl_hdr));
    L->key_in = off;
    off += yl_r256(S * sizeof(unsigned));
    L->key_out = off;
    off += yl_r256(S * sizeof(unsigned));
    L->val_in = off;
    off += yl_r256(S * sizeof(int));
    L->val_out = off;
    off += yl_r256(S * sizeof(int));
    L->cls = off;
    off += yl_r256(S * sizeof(int));
    L->tbox = off;
    off += yl_r256(S * 4 * sizeof(float));
    L->pbox = off;
    off += yl_r256(S * 4 * sizeof(float));
    L->ciou = off;
    off += yl_r256(S * sizeof(float));
    L->winner = off;
    off += yl_r256(cells * sizeof(int));
    L->part = off;
    off += yl_r256((size_t)d->nl * YL_PARTS * 4 * sizeof(double));
    L->scales = off;
    off += yl_r256(2 * KERN_YOLO_MAX_LEVELS * sizeof(float));
    L->temp = off;
    L->temp_bytes = temp;
    off += yl_r256(temp);
    L->total = off + 256; /* slack: the caller's base is only 16-byte aligned */
    return 0;
}

int kern_cuda_yolo_loss_scratch_size(struct kern_ctx *ctx, const struct kern_yolo_loss *d,
                                     size_t *bytes)
{
    if (ctx && ctx->backend != KERN_BACKEND_CUDA) return -KERN_EBACKEND;
    if (!bytes) return -EINVAL;
    int rc = kern_yolo_loss_check(d);
    if (rc < 0) return rc;
    if (d->blk) return -EINVAL;
    yl_layout L;
    if ((rc = yl_plan(d, &L)) < 0) return rc;
    *bytes = L.total;
    return 0;
}

/* ---- device helpers ---- */

/* The row of anchor a at cell `cell` (gj nx + gi) of image b on level l: its first element and
 * the step between its elements, in p's layout (RAW16). */
struct yl_row {
    size_t at, ks;
};

static __device__ __forceinline__ yl_row yl_row_of(const yl_args &A, int l, size_t b, size_t a,
                                                   size_t cell)
{
    const size_t na = (size_t)A.d.na, no = (size_t)A.d.nc + 5;
    const size_t hw = (size_t)A.d.ny[l] * (size_t)A.d.nx[l];
    if (!A.raw16) return { ((b * na + a) * hw + cell) * no, 1 };
    if (A.nhwc) return { (b * hw + cell) * na * no + a * no, 1 };
    return { (b * na + a) * no * hw + cell, hw };
}

/* The row of level l's cell index c ((b na + a) hw + cell, the winner's and the keys' order). */
static __device__ __forceinline__ yl_row yl_row_at(const yl_args &A, int l, size_t c)
{
    const size_t hw = (size_t)A.d.ny[l] * (size_t)A.d.nx[l], na = (size_t)A.d.na;
    return yl_row_of(A, l, c / hw / na, c / hw % na, c % hw);
}

/* Element i of p[l], widened. */
static __device__ __forceinline__ float yl_get(const yl_args &A, int l, size_t i)
{
    return A.raw16 ? kern_bf16_to_f32(((const uint16_t *)A.p[l])[i]) : A.p[l][i];
}

static __device__ __forceinline__ float yl_bce(float x, float t, float pw)
{
    if (pw == 1.0f) return fmaxf(x, 0.0f) - x * t + log1pf(expf(-fabsf(x)));
    const float lw = (pw - 1.0f) * t + 1.0f;
    return (1.0f - t) * x + lw * (log1pf(expf(-fabsf(x))) + fmaxf(-x, 0.0f));
}

static __device__ __forceinline__ float yl_bce_grad(float x, float t, float pw)
{
    const float s = kern_cuda_sigmoid(x);
    if (pw == 1.0f) return s - t;
    const float lw = (pw - 1.0f) * t + 1.0f;
    return (1.0f - t) - lw * (1.0f - s);
}

static __device__ __forceinline__ float yl_frac(float x)
{
    float r = fmodf(x, 1.0f);
    if (r != 0.0f && r < 0.0f) r += 1.0f;
    return r;
}

static __device__ __forceinline__ int yl_cell(float v, int hi)
{
    if (!(v > 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

static __device__ __forceinline__ float yl_tobj(const kern_yolo_loss &d, float ciou)
{
    const float io = fmaxf(ciou, 0.0f);
    return d.gr < 1.0f ? (1.0f - d.gr) + d.gr * io : io;
}

/* Sums v[0..4) over the block (blockDim.x == KERN_CUDA_THREADS); thread 0 gets the totals. */
static __device__ void yl_block_sum4(double v[4])
{
    __shared__ double sh[4][KERN_CUDA_THREADS / 32];
    for (int k = 0; k < 4; k++)
        for (int o = 16; o > 0; o >>= 1)
            v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        for (int k = 0; k < 4; k++)
            sh[k][warp] = v[k];
    __syncthreads();
    if (warp == 0) {
        for (int k = 0; k < 4; k++) {
            v[k] = lane < KERN_CUDA_THREADS / 32 ? sh[k][lane] : 0.0;
            for (int o = 16; o > 0; o >>= 1)
                v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
        }
    }
    __syncthreads();
}

/* ---- kernels ---- */

__global__ void yl_init(yl_args A)
{
    const size_t cells = (size_t)A.cell_off[A.d.nl];
    KERN_CUDA_LOOP(i, cells)
    {
        A.winner[i] = -1;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const int nt = *A.nt;
        const int bad = nt < 0 || nt > A.d.max_targets || (nt > 0 && !A.targets);
        A.hdr->status = bad ? KERN_YOLO_BAD_COUNT : 0;
        A.hdr->nt = bad ? 0 : nt;
    }
}

__global__ void yl_build(yl_args A)
{
    const kern_yolo_loss &d = A.d;
    const int l = blockIdx.y;
    const int nt = A.hdr->nt, mt = d.max_targets, na = d.na;
    const float fnx = (float)d.nx[l], fny = (float)d.ny[l];
    const float cp = 1.0f - 0.5f * d.label_smoothing, cn = 0.5f * d.label_smoothing;
    const unsigned sentinel = (unsigned)A.cell_off[d.nl];
    double acc[4] = { 0.0, 0.0, 0.0, 0.0 };
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < A.cap; s += blockDim.x * gridDim.x) {
        const int o = s / (na * mt), a = (s / mt) % na, t = s % mt;
        const int g = l * A.cap + s;
        unsigned key = sentinel;
        if (t < nt) {
            const float *const row = A.targets + 6 * (size_t)t;
            int okrow = 1;
            for (int k = 0; k < 6; k++)
                okrow &= isfinite(row[k]) ? 1 : 0;
            okrow = okrow && row[0] >= 0.0f && row[0] < (float)d.bs && row[1] >= 0.0f &&
                    row[1] < (float)d.nc && !(row[4] < 0.0f) && !(row[5] < 0.0f);
            if (!okrow && s < mt && l == 0) atomicOr(&A.hdr->status, KERN_YOLO_BAD_ROW);
            const float gx = row[2] * fnx, gy = row[3] * fny;
            const float gw = row[4] * fnx, gh = row[5] * fny;
            const float rw = gw / d.anchors[l][a][0], rh = gh / d.anchors[l][a][1];
            const float mw = fmaxf(rw, 1.0f / rw), mh = fmaxf(rh, 1.0f / rh);
            const float gxi = fnx - gx, gyi = fny - gy;
            int sel = okrow && fmaxf(mw, mh) < d.anchor_t;
            float ox = 0.0f, oy = 0.0f;
            switch (o) {
            case 1:
                sel = sel && yl_frac(gx) < 0.5f && gx > 1.0f;
                ox = 0.5f;
                break;
            case 2:
                sel = sel && yl_frac(gy) < 0.5f && gy > 1.0f;
                oy = 0.5f;
                break;
            case 3:
                sel = sel && yl_frac(gxi) < 0.5f && gxi > 1.0f;
                ox = -0.5f;
                break;
            case 4:
                sel = sel && yl_frac(gyi) < 0.5f && gyi > 1.0f;
                oy = -0.5f;
                break;
            default:
                break;
            }
            if (sel) {
                const int gi = yl_cell(gx - ox, d.nx[l] - 1), gj = yl_cell(gy - oy, d.ny[l] - 1);
                const int b = (int)row[0], c = (int)row[1];
                const int cell = ((b * na + a) * d.ny[l] + gj) * d.nx[l] + gi;
                key = (unsigned)(A.cell_off[l] + cell);
                float *const tb = A.tbox + 4 * (size_t)g;
                tb[0] = gx - (float)gi;
                tb[1] = gy - (float)gj;
                tb[2] = gw;
                tb[3] = gh;
                A.cls[g] = c;
                const yl_row R = yl_row_of(A, l, (size_t)b, (size_t)a,
                                           (size_t)gj * (size_t)d.nx[l] + (size_t)gi);
                float pb[4];
                pb[0] = kern_cuda_sigmoid(yl_get(A, l, R.at)) * 2.0f - 0.5f;
                pb[1] = kern_cuda_sigmoid(yl_get(A, l, R.at + R.ks)) * 2.0f - 0.5f;
                const float qw = kern_cuda_sigmoid(yl_get(A, l, R.at + 2 * R.ks)) * 2.0f;
                const float qh = kern_cuda_sigmoid(yl_get(A, l, R.at + 3 * R.ks)) * 2.0f;
                pb[2] = (qw * qw) * d.anchors[l][a][0];
                pb[3] = (qh * qh) * d.anchors[l][a][1];
                float *const pbg = A.pbox + 4 * (size_t)g;
                for (int k = 0; k < 4; k++)
                    pbg[k] = pb[k];
                kern_ciou_terms cs;
                kern_ciou_eval(pb, tb, &cs);
                A.ciou[g] = cs.ciou;
                atomicMax(&A.winner[key], g);
                acc[0] += 1.0;
                acc[1] += (double)(1.0f - cs.ciou);
                if (d.nc > 1) {
                    double sc = 0.0;
                    for (int k = 0; k < d.nc; k++)
                        sc += (double)yl_bce(yl_get(A, l, R.at + (size_t)(5 + k) * R.ks),
                                             k == c ? cp : cn, d.cls_pw);
                    acc[2] += sc;
                }
            }
        }
        A.key_in[g] = key;
        A.val_in[g] = g;
    }
    yl_block_sum4(acc);
    if (threadIdx.x == 0) {
        double *const pt = A.part + ((size_t)l * YL_PARTS + blockIdx.x) * 4;
        pt[0] = acc[0];
        pt[1] = acc[1];
        pt[2] = acc[2];
    }
}

__global__ void yl_obj(yl_args A, int write_grad)
{
    const kern_yolo_loss &d = A.d;
    const int l = blockIdx.y, no = d.nc + 5;
    const size_t cells = (size_t)(A.cell_off[l + 1] - A.cell_off[l]);
    const int *const win = A.winner + A.cell_off[l];
    const float *const pl = A.p[l];
    double acc[4] = { 0.0, 0.0, 0.0, 0.0 };
    const size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < cells; c += stride) {
        const int w = win[c];
        const float t = w >= 0 ? yl_tobj(d, A.ciou[w]) : 0.0f;
        const yl_row R = yl_row_at(A, l, c);
        acc[3] += (double)yl_bce(yl_get(A, l, R.at + 4 * R.ks), t, d.obj_pw);
    }
    yl_block_sum4(acc);
    if (threadIdx.x == 0) A.part[((size_t)l * YL_PARTS + blockIdx.x) * 4 + 3] = acc[3];
    if (!write_grad) return;
    float *const dl = A.dp[l];
    const float scale = A.obj_scale[l];
    const size_t count = cells * (size_t)no;
    if (A.raw16) { /* every element of dp in memory order; c: its cell index, k: its column */
        uint16_t *const d16 = (uint16_t *)dl;
        const size_t na = (size_t)d.na, hw = (size_t)d.ny[l] * (size_t)d.nx[l];
        const size_t ch_n = na * (size_t)no;
        for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += stride) {
            size_t b, cell, ch;
            if (A.nhwc)
                ch = e % ch_n, cell = e / ch_n % hw, b = e / ch_n / hw;
            else
                cell = e % hw, ch = e / hw % ch_n, b = e / hw / ch_n;
            const size_t a = ch / (size_t)no, k = ch % (size_t)no;
            float gv = 0.0f;
            if (k == 4) {
                const int w = win[(b * na + a) * hw + cell];
                const float t = w >= 0 ? yl_tobj(d, A.ciou[w]) : 0.0f;
                gv = yl_bce_grad(yl_get(A, l, e), t, d.obj_pw) * scale;
            }
            d16[e] = kern_bf16_from_f32(gv);
        }
        return;
    }
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += stride) {
        const size_t c = e / (size_t)no;
        const int k = (int)(e - c * (size_t)no);
        if (k == 4) {
            const int w = win[c];
            const float t = w >= 0 ? yl_tobj(d, A.ciou[w]) : 0.0f;
            const float gv = yl_bce_grad(pl[e], t, d.obj_pw) * scale;
            dl[e] = A.add ? dl[e] + gv : gv;
        } else if (!A.add) {
            dl[e] = 0.0f;
        }
    }
}

__global__ void yl_final(yl_args A)
{
    const kern_yolo_loss &d = A.d;
    const float fbs = (float)d.bs;
    float lbox = 0.0f, lobj = 0.0f, lcls = 0.0f;
    for (int l = 0; l < d.nl; l++) {
        double v[4] = { 0.0, 0.0, 0.0, 0.0 };
        for (int i = threadIdx.x; i < YL_PARTS; i += blockDim.x)
            for (int k = 0; k < 4; k++)
                v[k] += A.part[((size_t)l * YL_PARTS + i) * 4 + k];
        yl_block_sum4(v);
        if (threadIdx.x == 0) {
            const int n = (int)v[0];
            const double cells = (double)(A.cell_off[l + 1] - A.cell_off[l]);
            float gci = 0.0f, gcls = 0.0f;
            if (n > 0) {
                lbox += (float)(v[1] / n);
                if (d.nc > 1) lcls += (float)(v[2] / ((double)n * (double)d.nc));
                gci = -(fbs * d.box) / (float)n;
                gcls = (float)((double)(fbs * d.cls) / ((double)n * (double)d.nc));
            }
            lobj += (float)(v[3] / cells) * d.balance[l];
            A.scales[l] = gci;
            A.scales[KERN_YOLO_MAX_LEVELS + l] = gcls;
        }
    }
    if (threadIdx.x == 0) {
        const int st = A.hdr->status;
        float *const o = A.out;
        o[KERN_YOLO_OUT_RAW_BOX] = lbox;
        o[KERN_YOLO_OUT_RAW_OBJ] = lobj;
        o[KERN_YOLO_OUT_RAW_CLS] = lcls;
        o[KERN_YOLO_OUT_LBOX] = lbox * d.box;
        o[KERN_YOLO_OUT_LOBJ] = lobj * d.obj;
        o[KERN_YOLO_OUT_LCLS] = lcls * d.cls;
        o[KERN_YOLO_OUT_TOTAL] =
            (o[KERN_YOLO_OUT_LBOX] + o[KERN_YOLO_OUT_LOBJ] + o[KERN_YOLO_OUT_LCLS]) * fbs;
        if (st)
            for (int k = 0; k < KERN_YOLO_OUT_STATUS; k++)
                o[k] = __int_as_float(0x7fc00000);
        o[KERN_YOLO_OUT_STATUS] = (float)st;
    }
}

/* RAW16's yl_grad for the run of cell `key` starting at sorted slot i: each element's float32
 * sum over the run's entries in slot order (the float32 path's additions into its zeroed dp),
 * stored rounded once. */
static __device__ void yl_grad_raw16(const yl_args &A, int i, int n_slots, unsigned key)
{
    const kern_yolo_loss &d = A.d;
    const float cp = 1.0f - 0.5f * d.label_smoothing, cn = 0.5f * d.label_smoothing;
    int end = i;
    while (end < n_slots && A.key_out[end] == key)
        end++;
    const int l = A.val_out[i] / A.cap;
    const yl_row R = yl_row_at(A, l, (size_t)(key - (unsigned)A.cell_off[l]));
    uint16_t *const ds = (uint16_t *)A.dp[l];
    float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int j = i; j < end; j++) {
        const int g = A.val_out[j];
        const int a = (g - l * A.cap) / d.max_targets % d.na;
        float db[4];
        kern_ciou_grad(A.pbox + 4 * (size_t)g, A.tbox + 4 * (size_t)g, A.scales[l], db, NULL);
        for (int k = 0; k < 2; k++) {
            const float s = kern_cuda_sigmoid(yl_get(A, l, R.at + (size_t)k * R.ks));
            acc[k] += db[k] * 2.0f * (s * (1.0f - s));
        }
        for (int k = 2; k < 4; k++) {
            const float s = kern_cuda_sigmoid(yl_get(A, l, R.at + (size_t)k * R.ks));
            const float q = s * 2.0f;
            acc[k] += ((db[k] * d.anchors[l][a][k - 2]) * (2.0f * q)) * 2.0f * (s * (1.0f - s));
        }
    }
    for (int k = 0; k < 4; k++)
        ds[R.at + (size_t)k * R.ks] = kern_bf16_from_f32(acc[k]);
    if (d.nc <= 1) return;
    const float gcls = A.scales[KERN_YOLO_MAX_LEVELS + l];
    for (int k = 0; k < d.nc; k++) {
        const size_t at = R.at + (size_t)(5 + k) * R.ks;
        const float x = yl_get(A, l, at);
        float v = 0.0f;
        for (int j = i; j < end; j++)
            v += yl_bce_grad(x, k == A.cls[A.val_out[j]] ? cp : cn, d.cls_pw) * gcls;
        ds[at] = kern_bf16_from_f32(v);
    }
}

__global__ void yl_grad(yl_args A, int n_slots)
{
    const kern_yolo_loss &d = A.d;
    const unsigned sentinel = (unsigned)A.cell_off[d.nl];
    const int no = d.nc + 5;
    const float cp = 1.0f - 0.5f * d.label_smoothing, cn = 0.5f * d.label_smoothing;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_slots; i += blockDim.x * gridDim.x) {
        const unsigned key = A.key_out[i];
        if (key == sentinel || (i > 0 && A.key_out[i - 1] == key)) continue;
        if (A.raw16) {
            yl_grad_raw16(A, i, n_slots, key);
            continue;
        }
        /* The first of this cell's run: add every entry of the run, in slot order. */
        for (int j = i; j < n_slots && A.key_out[j] == key; j++) {
            const int g = A.val_out[j];
            const int l = g / A.cap;
            const int a = (g - l * A.cap) / d.max_targets % d.na;
            const size_t r = (size_t)(key - (unsigned)A.cell_off[l]) * (size_t)no;
            const float *const ps = A.p[l] + r;
            float *const ds = A.dp[l] + r;
            float db[4];
            kern_ciou_grad(A.pbox + 4 * (size_t)g, A.tbox + 4 * (size_t)g, A.scales[l], db, NULL);
            for (int k = 0; k < 2; k++) {
                const float s = kern_cuda_sigmoid(ps[k]);
                ds[k] += db[k] * 2.0f * (s * (1.0f - s));
            }
            for (int k = 2; k < 4; k++) {
                const float s = kern_cuda_sigmoid(ps[k]);
                const float q = s * 2.0f;
                ds[k] += ((db[k] * d.anchors[l][a][k - 2]) * (2.0f * q)) * 2.0f * (s * (1.0f - s));
            }
            if (d.nc > 1) {
                const float gcls = A.scales[KERN_YOLO_MAX_LEVELS + l];
                const int c = A.cls[g];
                for (int k = 0; k < d.nc; k++)
                    ds[5 + k] += yl_bce_grad(ps[5 + k], k == c ? cp : cn, d.cls_pw) * gcls;
            }
        }
    }
}

int kern_cuda_yolo_loss(struct kern_ctx *ctx, const struct kern_yolo_loss *d, float *const *dp,
                        float *__restrict__ out, const float *const *p,
                        const float *__restrict__ targets, const int *__restrict__ nt,
                        void *scratch, size_t scratch_bytes, unsigned accum)
{
    KERN_CHECK_CUDA_CTX(ctx);
    KERN_CHECK_ACCUM(accum);
    int rc = kern_yolo_loss_check(d);
    if (rc < 0) return rc;
    if (!out || !p || !nt || d->blk) return -EINVAL; /* no blocked layout here (kern_loss.h) */
    if (d->raw16 && (accum & KERN_ACCUM_DX)) return -EINVAL;
    for (int l = 0; l < d->nl; l++)
        if (!p[l] || (dp && !dp[l])) return -EINVAL;
    if (!scratch) {
        scratch = ctx->ws;
        scratch_bytes = ctx->ws_size;
        if (!scratch) return -KERN_EWORKSPACE;
    }
    if (((uintptr_t)scratch & 15u) != 0) return -EINVAL;
    yl_layout L;
    if ((rc = yl_plan(d, &L)) < 0) return kern_cuda_fail(ctx, cudaErrorUnknown, "yolo_loss plan");
    if (scratch_bytes < L.total) return -KERN_EWORKSPACE;
    char *const base = (char *)(((uintptr_t)scratch + 255) & ~(uintptr_t)255);

    yl_args A;
    memset(&A, 0, sizeof A);
    A.d = *d;
    int cells = 0;
    for (int l = 0; l < d->nl; l++) {
        A.p[l] = p[l];
        A.dp[l] = dp ? dp[l] : NULL;
        A.cell_off[l] = cells;
        const int cl = d->bs * d->na * d->ny[l] * d->nx[l];
        cells += cl;
        /* kern_ref_bce_logits_bwd's scale for dloss = bs obj balance. */
        const float go = (float)d->bs * d->obj * d->balance[l];
        A.obj_scale[l] = (float)((double)go / (double)cl);
    }
    A.cell_off[d->nl] = cells;
    A.cap = KERN_YOLO_OFFSETS * d->na * d->max_targets;
    A.add = (accum & KERN_ACCUM_DX) != 0;
    A.raw16 = d->raw16;
    A.nhwc = d->raw_layout == KERN_LAYOUT_NHWC;
    A.targets = targets;
    A.nt = nt;
    A.out = out;
    A.hdr = (yl_hdr *)(base + L.hdr);
    A.key_in = (unsigned *)(base + L.key_in);
    A.key_out = (unsigned *)(base + L.key_out);
    A.val_in = (int *)(base + L.val_in);
    A.val_out = (int *)(base + L.val_out);
    A.cls = (int *)(base + L.cls);
    A.tbox = (float *)(base + L.tbox);
    A.pbox = (float *)(base + L.pbox);
    A.ciou = (float *)(base + L.ciou);
    A.winner = (int *)(base + L.winner);
    A.part = (double *)(base + L.part);
    A.scales = (float *)(base + L.scales);
    const int n_slots = A.cap * d->nl;

    cudaStream_t const s = kern_cuda_st(ctx)->stream;
    const dim3 grid(YL_PARTS, (unsigned)d->nl);
    yl_init<<<kern_cuda_blocks((size_t)cells), KERN_CUDA_THREADS, 0, s>>>(A);
    yl_build<<<grid, KERN_CUDA_THREADS, 0, s>>>(A);
    yl_obj<<<grid, KERN_CUDA_THREADS, 0, s>>>(A, dp != NULL);
    yl_final<<<1, KERN_CUDA_THREADS, 0, s>>>(A);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && dp) {
        size_t temp = L.temp_bytes;
        e = cub::DeviceRadixSort::SortPairs((void *)(base + L.temp), temp, A.key_in, A.key_out,
                                            A.val_in, A.val_out, n_slots, 0, yl_sort_bits(cells),
                                            s);
        if (e == cudaSuccess) {
            yl_grad<<<kern_cuda_blocks((size_t)n_slots), KERN_CUDA_THREADS, 0, s>>>(A, n_slots);
            e = cudaGetLastError();
        }
    }
    if (e != cudaSuccess) return kern_cuda_fail(ctx, e, "yolo_loss");
    return 0;
}
