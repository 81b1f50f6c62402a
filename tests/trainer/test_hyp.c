/*
 * The hyp yaml reader: ultralytics' two scratch files (as shipped in datasets/hyps), unknown and
 * missing keys reported, and every kind of bad value rejected with the file and line.
 * argv[1]: the datasets/hyps directory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hyp.h"
#include "tap.h"

struct notes {
    int n;
    char last[512];
    char all[4096];
};

static void collect(void *ctx, const char *msg)
{
    struct notes *c = ctx;
    c->n++;
    snprintf(c->last, sizeof c->last, "%s", msg);
    const size_t used = strlen(c->all);
    snprintf(c->all + used, sizeof c->all - used, "%s\n", msg);
}

/* Parse text; returns rc and leaves the error line in err. */
static int parse(const char *text, struct trn_hyp *h, struct notes *c, char *err, size_t cap)
{
    memset(c, 0, sizeof *c);
    err[0] = '\0';
    return trn_hyp_parse(text, strlen(text), "t.yaml", collect, c, h, err, cap);
}

static void test_files(const char *dir)
{
    char path[4096], err[256];
    struct trn_hyp d, h;
    struct notes c = { 0 };
    trn_hyp_default(&d);
    ok(d.lr0 == 0.01 && d.lrf == 0.01 && d.momentum == 0.937 && d.weight_decay == 0.0005 &&
           d.warmup_epochs == 3.0 && d.warmup_momentum == 0.8 && d.warmup_bias_lr == 0.1 &&
           d.box == 0.05 && d.cls == 0.5 && d.cls_pw == 1.0 && d.obj == 1.0 && d.obj_pw == 1.0 &&
           d.iou_t == 0.20 && d.anchor_t == 4.0 && d.anchors == 0 && d.fl_gamma == 0.0 &&
           d.hsv_h == 0.015 && d.hsv_s == 0.7 && d.hsv_v == 0.4 && d.degrees == 0 &&
           d.translate == 0.1 && d.scale == 0.5 && d.shear == 0 && d.perspective == 0 &&
           d.flipud == 0 && d.fliplr == 0.5 && d.mosaic == 1.0 && d.mixup == 0 && d.copy_paste == 0,
       "defaults are ultralytics' scratch-low values");
    is_int(trn_hyp_check(&d, err, sizeof err), 0, "defaults pass the range check");

    snprintf(path, sizeof path, "%s/hyp.scratch-low.yaml", dir);
    int rc = trn_hyp_load(path, collect, &c, &h, err, sizeof err);
    is_int(rc, 0, "hyp.scratch-low.yaml loads (%s)", rc ? err : "ok");
    ok(memcmp(&h, &d, sizeof h) == 0, "hyp.scratch-low.yaml equals the built-in defaults");
    is_int(c.n, 0, "no notes for a complete file (%s)", c.last);

    memset(&c, 0, sizeof c);
    snprintf(path, sizeof path, "%s/hyp.scratch-high.yaml", dir);
    rc = trn_hyp_load(path, collect, &c, &h, err, sizeof err);
    is_int(rc, 0, "hyp.scratch-high.yaml loads (%s)", rc ? err : "ok");
    ok(h.lrf == 0.1 && h.cls == 0.3 && h.obj == 0.7 && h.scale == 0.9 && h.mixup == 0.1 &&
           h.copy_paste == 0.1 && h.lr0 == 0.01 && h.mosaic == 1.0 && h.fliplr == 0.5,
       "hyp.scratch-high.yaml has ultralytics' high-augmentation values");
    is_int(c.n, 0, "no notes for scratch-high");

    snprintf(path, sizeof path, "%s/no-such-hyp.yaml", dir);
    rc = trn_hyp_load(path, NULL, NULL, &h, err, sizeof err);
    ok(rc == -ENOENT && strstr(err, "no-such-hyp.yaml"), "missing file: -ENOENT naming it (%s)",
       err);
    rc = trn_hyp_load(dir, NULL, NULL, &h, err, sizeof err);
    ok(rc < 0, "a directory is refused (%s)", err);
}

static void test_notes(void)
{
    struct trn_hyp h, d;
    struct notes c;
    char err[256];
    trn_hyp_default(&d);
    int rc = parse("lr0: 0.02\nfoo: 3\nmosaic: 0.5\nalbumentations:\n  - name: Blur\n    p: 0.1\n",
                   &h, &c, err, sizeof err);
    is_int(rc, 0, "partial file with unknown keys parses (%s)", err);
    ok(h.lr0 == 0.02 && h.mosaic == 0.5 && h.lrf == d.lrf && h.fliplr == d.fliplr,
       "given keys set, missing keys keep the scratch-low defaults");
    ok(strstr(c.all, "t.yaml:2: unknown key 'foo' ignored") != NULL,
       "unknown key noted with its line");
    ok(strstr(c.all, "t.yaml:4: unknown key 'albumentations' ignored") != NULL,
       "unknown key with a list value noted and ignored");
    ok(strstr(c.all, "key 'lrf' missing; using the scratch-low default 0.01") != NULL,
       "missing key noted with its default");
    ok(strstr(c.all, "'anchors'") == NULL, "optional anchors not noted when absent");
    /* 29 keys, 2 given, anchors optional: 26 missing + 2 unknown. */
    is_int(c.n, 28, "one note per missing or unknown key");

    rc = parse("anchors: 3\nlr0: 1e-3\nlrf: .5\nmomentum: +0.9\nwarmup_epochs: 0\n", &h, &c, err,
               sizeof err);
    ok(rc == 0 && h.anchors == 3 && h.lr0 == 1e-3 && h.lrf == 0.5 && h.momentum == 0.9 &&
           h.warmup_epochs == 0,
       "numbers: integer, exponent, leading dot, plus sign (%s)", err);
    rc = trn_hyp_parse(NULL, 0, "empty.yaml", NULL, NULL, &h, err, sizeof err);
    ok(rc == -EINVAL && strstr(err, "empty.yaml"), "empty input refused (%s)", err);
}

static void test_errors(void)
{
    static const struct {
        const char *text, *want; /* want: substring of the error */
    } cases[] = {
        { "lr0: 0.01\nlrf: abc\n", "t.yaml:2: lrf: expected a number, got 'abc'" },
        { "mosaic: 1.5\n", "t.yaml:1: mosaic: 1.5 is outside [0, 1]" },
        { "lr0: 0\n", "t.yaml:1: lr0: 0 is outside (0, 1]" },
        { "scale: 1.0\n", "t.yaml:1: scale: 1 is outside [0, 1)" },
        { "fliplr: -0.1\n", "t.yaml:1: fliplr: -0.1 is outside [0, 1]" },
        { "anchor_t: 0.5\n", "anchor_t: 0.5 is outside [1, 100]" },
        { "anchors: 2.5\n", "t.yaml:1: anchors: 2.5 is not a whole number" },
        { "hsv_h: .nan\n", "t.yaml:1: hsv_h: expected a number" },
        { "hsv_h: .inf\n", "hsv_h: expected a number" },
        { "hsv_s: 1e999\n", "hsv_s: value is not finite" },
        { "lr0: '0.01'\n", "t.yaml:1: lr0: expected a number, got '0.01'" },
        { "lr0: true\n", "lr0: expected a number, got 'true'" },
        { "lr0: 0x10\n", "expected a number" },
        { "lr0: 1_0\n", "expected a number" },
        { "lr0: [1, 2]\n", "lr0: expected a number, got a list" },
        { "lr0: {a: 1}\n", "lr0: expected a number, got a mapping" },
        { "lr0:\n", "lr0: expected a number, got ''" },
        { "lr0: 0.01\n\nlr0: 0.02\n", "t.yaml:3: key 'lr0' given twice" },
        { "- lr0\n- 0.01\n", "t.yaml:1: expected a mapping" },
        { "just text\n", "expected a mapping" },
        { "lr0: 0.01\n  bad: [\n", "t.yaml:" },
        { "[1, 2]: 3\n", "t.yaml:1: a key must be a plain name" },
        { "", "empty document" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct trn_hyp h, d;
        struct notes c;
        char err[256];
        trn_hyp_default(&d);
        const int rc = parse(cases[i].text, &h, &c, err, sizeof err);
        ok(rc == -EINVAL && strstr(err, cases[i].want) != NULL && memcmp(&h, &d, sizeof h) == 0,
           "rejected with '%s' (got %d: %s)", cases[i].want, rc, err);
    }
    struct trn_hyp h;
    char err[128];
    trn_hyp_default(&h);
    h.perspective = 0.5;
    ok(trn_hyp_check(&h, err, sizeof err) == -EINVAL && strstr(err, "perspective"),
       "trn_hyp_check names the bad field (%s)", err);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: test_hyp DATASETS_HYPS_DIR\n");
        return 99;
    }
    test_files(argv[1]);
    test_notes();
    test_errors();
    return tap_done();
}
