/*
 * The detection sample encoding: round trips of random samples (labels, polygons, names, the
 * three pixel formats), the Sub filter's exactness and its effect on zstd, summaries, and
 * refusal of malformed samples (short buffers, wrong magic, NaN coordinates, fractional
 * classes, counts that do not add up, sizes that would overflow).
 */
#include <errno.h>
#include <math.h>

#include "det.h"
#include "ffr.h"
#include "det_internal.h"
#include "tap.h"
#include "testutil.h"

/* A smooth, photo-like image: gradients plus mild noise, as natural images are locally. */
static void smooth_image(uint64_t *s, uint8_t *p, uint32_t h, uint32_t w)
{
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                const double v =
                    128 + 60 * sin((x + 13 * c) / 37.0) * cos(y / 23.0) + (double)tu_below(s, 7);
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)v;
            }
}

static int same_sample(const struct det_sample *a, const struct det_sample *b)
{
    if (a->h != b->h || a->w != b->w || a->h0 != b->h0 || a->w0 != b->w0 ||
        a->pixel_format != b->pixel_format || a->n_labels != b->n_labels ||
        a->n_points != b->n_points || a->image_id != b->image_id || a->name_len != b->name_len)
        return 0;
    if (memcmp(a->labels, b->labels, 20 * (size_t)a->n_labels)) return 0;
    if (a->n_points && (memcmp(a->seg_counts, b->seg_counts, 4 * (size_t)a->n_labels) ||
                        memcmp(a->seg_points, b->seg_points, 8 * (size_t)a->n_points)))
        return 0;
    return memcmp(a->name, b->name, a->name_len) == 0;
}

static void round_trips(void)
{
    uint64_t s = 99;
    int bad = 0, bad_pixels = 0, bad_summary = 0;
    for (int it = 0; it < 200; it++) {
        struct det_sample in = { 0 };
        in.h = 1 + (uint32_t)tu_below(&s, 50);
        in.w = 1 + (uint32_t)tu_below(&s, 50);
        in.h0 = in.h * 2;
        in.w0 = in.w * 3;
        in.pixel_format = (uint32_t)tu_below(&s, 3);
        const size_t px = (size_t)in.h * in.w * 3;
        uint8_t *pixels = malloc(px);
        tu_fill(&s, pixels, px, 1);
        in.pixels = pixels;
        in.pixel_bytes =
            in.pixel_format == DET_JPEG ? (uint32_t)tu_below(&s, 99) + 1 : (uint32_t)px;
        in.n_labels = (uint32_t)tu_below(&s, 6);
        float *labels = malloc(20 * (size_t)in.n_labels + 4);
        for (uint32_t i = 0; i < in.n_labels; i++) {
            labels[i * 5] = (float)tu_below(&s, 80);
            for (int k = 1; k < 5; k++)
                labels[i * 5 + k] = (float)tu_below(&s, 1000) / 1000.0f;
        }
        in.labels = labels;
        uint32_t *counts = calloc(in.n_labels + 1, 4);
        float *pts = NULL;
        if (tu_below(&s, 2) && in.n_labels) {
            for (uint32_t i = 0; i < in.n_labels; i++)
                in.n_points += counts[i] = (uint32_t)tu_below(&s, 9);
            pts = malloc(8 * (size_t)in.n_points + 8);
            for (uint32_t i = 0; i < 2 * in.n_points; i++)
                pts[i] = (float)tu_below(&s, 997) / 997;
            if (in.n_points) {
                in.seg_counts = counts;
                in.seg_points = pts;
            }
        }
        char name[32];
        in.name_len = (uint32_t)snprintf(name, sizeof name, "%012d.jpg", it);
        in.name = name;
        in.image_id = it % 7 == 0 ? -1 : it * 1000;

        const size_t need = det_encoded_size(&in);
        uint8_t *buf = malloc(need + 8);
        const int64_t n = det_encode(&in, buf, need);
        struct det_sample out;
        if (n != (int64_t)need || det_decode(buf, (size_t)n, &out) != 0 ||
            !same_sample(&in, &out)) {
            bad++;
        } else if (in.pixel_format != DET_JPEG) {
            uint8_t *plain = malloc(px);
            if (det_pixels(&out, plain, px) != (int64_t)px || memcmp(plain, pixels, px))
                bad_pixels++;
            free(plain);
        } else if (memcmp(out.pixels, pixels, in.pixel_bytes) ||
                   det_pixels(&out, pixels, px) != -ENOTSUP) {
            bad_pixels++;
        }
        uint8_t sum[200];
        struct det_summary sd;
        const int64_t sn = det_summary_encode(&in, sum, sizeof sum);
        if (sn != (int64_t)det_summary_size(&in) || det_summary_decode(sum, (size_t)sn, &sd) != 0 ||
            sd.h != in.h || sd.w0 != in.w0 || sd.n_labels != in.n_labels ||
            memcmp(sd.labels, labels, 20 * (size_t)in.n_labels))
            bad_summary++;
        /* Every shorter buffer is refused. */
        for (size_t cut = 0; cut < (size_t)n; cut += 1 + (size_t)n / 50)
            if (det_decode(buf, cut, &out) == 0) bad++;
        free(buf);
        free(pixels);
        free(labels);
        free(counts);
        free(pts);
    }
    is_int(bad, 0, "200 random samples round-trip and every truncation is refused");
    is_int(bad_pixels, 0, "pixels come back exactly in all three formats");
    is_int(bad_summary, 0, "summaries round-trip");
}

static void sub_filter_pays(void)
{
    const uint32_t h = 480, w = 640;
    const size_t n = (size_t)h * w * 3;
    uint8_t *img = malloc(n), *f = malloc(n), *back = malloc(n);
    uint64_t s = 5;
    smooth_image(&s, img, h, w);
    det_sub_filter(f, img, h, w);
    det_sub_unfilter(back, f, h, w);
    ok(memcmp(img, back, n) == 0, "Sub filter then unfilter is the identity");
    struct ffr_codec *c;
    ffr_codec_create(&c);
    uint8_t *z = malloc(ffr_encode_bound(n));
    int used;
    const int64_t plain = ffr_encode(c, z, ffr_encode_bound(n), img, n, FFR_CODEC_ZSTD, 1, &used);
    const int64_t filt = ffr_encode(c, z, ffr_encode_bound(n), f, n, FFR_CODEC_ZSTD, 1, &used);
    tap_diag("smooth 640x480: zstd-1 ratio %.2f plain, %.2f after Sub", (double)n / (double)plain,
             (double)n / (double)filt);
    ok(filt < plain, "the Sub filter makes zstd smaller on a smooth image");
    /* Random bytes do not compress: the encoder stores them raw. */
    tu_fill(&s, img, n, 0);
    const int64_t rnd = ffr_encode(c, z, ffr_encode_bound(n), img, n, FFR_CODEC_ZSTD, 1, &used);
    ok(rnd == (int64_t)n && used == FFR_CODEC_RAW, "incompressible data is stored raw");
    ffr_codec_destroy(c);
    free(z);
    free(img);
    free(f);
    free(back);
}

/* Files written before version 2 hold samples with a 64-byte header: they must still read, with
 * every field and view where version 1 put it. */
static void version1(void)
{
    uint8_t pixels[2 * 3 * 3];
    for (unsigned k = 0; k < sizeof pixels; k++)
        pixels[k] = (uint8_t)(k * 37 + 5);
    const float labels[5] = { 7, 0.5f, 0.25f, 0.5f, 0.5f };
    const uint32_t counts[1] = { 2 };
    const float pts[4] = { 0.25f, 0.25f, 0.75f, 0.5f };
    const struct det_sample in = { .h = 2,
                                   .w = 3,
                                   .h0 = 20,
                                   .w0 = 30,
                                   .pixel_format = DET_RGB8_SUB,
                                   .pixels = pixels,
                                   .pixel_bytes = sizeof pixels,
                                   .n_labels = 1,
                                   .labels = labels,
                                   .n_points = 2,
                                   .seg_counts = counts,
                                   .seg_points = pts,
                                   .image_id = 42,
                                   .name = "v1.jpg",
                                   .name_len = 6 };
    uint8_t v2[256] __attribute__((aligned(8))), v1[256] __attribute__((aligned(8)));
    const int64_t n = det_encode(&in, v2, sizeof v2);
    struct det_sample out;
    ok(n > 0 && det_rd16(v2 + 4) == 2 && det_decode(v2, (size_t)n, &out) == 0 &&
           out.pixels == v2 + DET_PIXEL_OFFSET,
       "writers write version 2, pixels at DET_PIXEL_OFFSET");
    /* The offset's purpose (format.md 8.2): rows of a frame-aligned record do not start on a
     * 16-byte boundary. */
    is_int(DET_PIXEL_OFFSET % 16, 8, "pixel offset is 8 past a multiple of 16");

    /* The version 1 layout: the same header without bytes 64..71. */
    memcpy(v1, v2, 64);
    memcpy(v1 + 64, v2 + DET_PIXEL_OFFSET, (size_t)n - DET_PIXEL_OFFSET);
    det_wr(v1 + 4, 1, 2);
    const size_t n1 = (size_t)n - (DET_PIXEL_OFFSET - 64);
    memset(&out, 0xa5, sizeof out);
    const int rc = det_decode(v1, n1, &out);
    is_int(rc, 0, "a version 1 sample decodes");
    uint8_t plain[sizeof pixels];
    ok(rc == 0 && out.h == 2 && out.w == 3 && out.h0 == 20 && out.w0 == 30 &&
           out.pixel_format == DET_RGB8_SUB && out.pixels == v1 + 64 &&
           out.pixel_bytes == sizeof pixels && out.n_labels == 1 &&
           !memcmp(out.labels, labels, sizeof labels) && out.n_points == 2 &&
           out.seg_counts[0] == 2 && !memcmp(out.seg_points, pts, sizeof pts) &&
           out.image_id == 42 && out.name_len == 6 && !memcmp(out.name, "v1.jpg", 6) &&
           det_pixels(&out, plain, sizeof plain) == (int64_t)sizeof plain &&
           !memcmp(plain, pixels, sizeof pixels),
       "version 1: every field, view and pixel where version 1 put them");
    det_wr(v1 + 4, 2, 2);
    is_int(det_decode(v1, n1, &out), -FFR_ECORRUPT, "version 1 layout labelled 2");
    det_wr(v1 + 4, 1, 2);
    v1[63] = 1;
    is_int(det_decode(v1, n1, &out), -FFR_ECORRUPT, "version 1 reserved byte set");
}

static void malformed(void)
{
    uint8_t pixels[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
    float labels[10] = { 3, 0.5f, 0.5f, 0.2f, 0.2f, 1, 0.1f, 0.1f, 0.1f, 0.1f };
    struct det_sample in = { .h = 2,
                             .w = 2,
                             .h0 = 2,
                             .w0 = 2,
                             .pixels = pixels,
                             .pixel_bytes = 12,
                             .n_labels = 2,
                             .labels = labels,
                             .name = "a.jpg",
                             .name_len = 5,
                             .image_id = 1 };
    uint8_t buf[512] __attribute__((aligned(8)));
    const int64_t n = det_encode(&in, buf, sizeof buf);
    struct det_sample out;
    ok(n > 0 && det_decode(buf, (size_t)n, &out) == 0, "a valid sample decodes");

    uint8_t b[512] __attribute__((aligned(8)));
    memcpy(b, buf, (size_t)n);
    b[0] = 'X';
    is_int(det_decode(b, (size_t)n, &out), -FFR_EBADMAGIC, "wrong magic");
    memcpy(b, buf, (size_t)n);
    det_wr(b + 4, 9, 2);
    is_int(det_decode(b, (size_t)n, &out), -FFR_EVERSION, "newer sample version");
    memcpy(b, buf, (size_t)n);
    det_wr(b + 28, 0x7fffffff, 4); /* n_labels */
    is_int(det_decode(b, (size_t)n, &out), -FFR_ECORRUPT, "absurd label count");
    memcpy(b, buf, (size_t)n);
    det_wr(b + 8, 3, 4); /* h no longer matches pixel_bytes */
    is_int(det_decode(b, (size_t)n, &out), -FFR_ECORRUPT, "dimensions disagree with pixels");
    memcpy(b, buf, (size_t)n);
    const float nan = NAN, half = 2.5f;
    memcpy(b + DET_PIXEL_OFFSET + 12 + 4, &nan, 4);
    is_int(det_decode(b, (size_t)n, &out), -FFR_ECORRUPT, "NaN coordinate");
    memcpy(b, buf, (size_t)n);
    memcpy(b + DET_PIXEL_OFFSET + 12, &half, 4);
    is_int(det_decode(b, (size_t)n, &out), -FFR_ECORRUPT, "fractional class");
    memcpy(b, buf, (size_t)n);
    is_int(det_decode(b, (size_t)n + 1, &out), -FFR_ECORRUPT, "trailing bytes");
    is_int(det_decode(b + 1, (size_t)n - 1, &out), -FFR_EBADMAGIC, "shifted buffer");
    memcpy(b, buf, (size_t)n);
    b[DET_PIXEL_OFFSET - 1] = 1;
    is_int(det_decode(b, (size_t)n, &out), -FFR_ECORRUPT, "version 2 reserved byte set");
    is_int(det_decode(buf, DET_PIXEL_OFFSET - 1, &out), -FFR_ECORRUPT,
           "shorter than the version 2 header");
    memcpy(b, buf, (size_t)n);
    det_wr(b + 4, 1, 2); /* a version 2 sample read as version 1: its sizes no longer add up */
    is_int(det_decode(b, (size_t)n, &out), -FFR_ECORRUPT, "version 2 layout labelled 1");

    in.pixel_bytes = 11;
    is_int(det_encode(&in, buf, sizeof buf), -EINVAL, "encoder refuses inconsistent pixels");
    in.pixel_bytes = 12;
    is_int(det_encode(&in, buf, 20), -FFR_ETOOBIG, "encoder refuses a small destination");
    uint32_t counts[2] = { 1, 1 };
    float pts[2] = { 0, 0 };
    in.n_points = 1; /* counts add up to 2 */
    in.seg_counts = counts;
    in.seg_points = pts;
    is_int(det_encode(&in, buf, sizeof buf), -EINVAL, "polygon counts must add up");

    uint8_t sum[64] __attribute__((aligned(8)));
    struct det_summary sd;
    in.n_points = 0;
    const int64_t sn = det_summary_encode(&in, sum, sizeof sum);
    is_int(det_summary_decode(sum, (size_t)sn - 1, &sd), -FFR_ECORRUPT, "short summary");
    det_wr(sum + 16, 1000000, 4);
    is_int(det_summary_decode(sum, (size_t)sn, &sd), -FFR_ECORRUPT, "summary count too big");
}

/* det_check / det_summary_check: what the loaders and ffr verify share (issue 20). */
static void semantics(void)
{
    float lab[10] = { 0, 0.5f, 0.5f, 0.2f, 0.2f, 3, 0.0f, 1.0f, 1.0f, 0.0f };
    struct det_sample s = {
        .h = 480, .w = 640, .h0 = 480, .w0 = 640, .n_labels = 2, .labels = lab
    };
    char why[200] = "";
    is_int(det_check(&s, why, sizeof why), 0, "a sample with boxes on [0, 1] passes");
    struct det_summary m = {
        .h = 480, .w = 640, .h0 = 480, .w0 = 640, .n_labels = 2, .labels = lab
    };
    is_int(det_summary_check(&m, why, sizeof why), 0, "its summary passes");
    static const struct {
        int i;
        float v;
        const char *says;
    } bad[] = { { 1, 1e30f, "label 0: cx = 1e+30" },
                { 8, -5.0f, "label 1: w = -5" },
                { 4, NAN, "label 0: h = nan" },
                { 7, 1.0001f, "label 1: cy = 1.0001" } };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const float keep = lab[bad[k].i];
        lab[bad[k].i] = bad[k].v;
        const int rc = det_check(&s, why, sizeof why);
        ok(rc == -FFR_ECORRUPT && strstr(why, bad[k].says), "%s: refused (%s)", bad[k].says, why);
        ok(det_summary_check(&m, why, sizeof why) == -FFR_ECORRUPT, "and in a summary");
        lab[bad[k].i] = keep;
    }
    s.h0 = 0;
    ok(det_check(&s, why, sizeof why) == -FFR_ECORRUPT && strstr(why, "original height 0"),
       "h0 = 0: %s", why);
    s.h0 = 480;
    m.w = 0x10000;
    ok(det_summary_check(&m, why, sizeof why) == -FFR_ECORRUPT && strstr(why, "stored width 65536"),
       "a side above DET_SIDE_MAX: %s", why);
}

int main(void)
{
    semantics();
    round_trips();
    sub_filter_pays();
    version1();
    malformed();
    return tap_done();
}
