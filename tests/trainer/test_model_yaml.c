/*
 * Model yaml parsing: the parse_model rules on small custom models (banker's rounding,
 * make_divisible, the c2 == no exception, Sequential copies, aliases, YAML 1.1 scalars) and every
 * kind of bad input, each refused with a code and a message naming the file, line and layer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "tap.h"
#include "errors.h"

/* A small valid model: lines are numbered in comments (1-based), the messages name them. */
static const char *const tiny_head = "nc: 4\n"                                          /* 1 */
                                     "depth_multiple: 1.0\n"                            /* 2 */
                                     "width_multiple: 1.0\n"                            /* 3 */
                                     "anchors:\n"                                       /* 4 */
                                     "  - [10,13, 16,30, 33,23]\n"                      /* 5 */
                                     "  - [30,61, 62,45, 59,119]\n"                     /* 6 */
                                     "backbone:\n"                                      /* 7 */
                                     "  [[-1, 1, Conv, [16, 3, 2]],\n"                  /* 8: 0 */
                                     "   [-1, 1, Conv, [32, 3, 2]],\n"                  /* 9: 1 */
                                     "   [-1, 1, C3, [32]],\n"                          /* 10: 2 */
                                     "   [-1, 1, Conv, [64, 3, 2]],\n"                  /* 11: 3 */
                                     "   [-1, 1, SPPF, [64, 5]],\n"                     /* 12: 4 */
                                     "  ]\n"                                            /* 13 */
                                     "head:\n"                                          /* 14 */
                                     "  [[-1, 1, nn.Upsample, [None, 2, 'nearest']],\n" /* 15: 5 */
                                     "   [[-1, 2], 1, Concat, [1]],\n"                  /* 16: 6 */
                                     "   [-1, 1, C3, [32, False]],\n"                   /* 17: 7 */
                                     "   [[7, 4], 1, Detect, [nc, anchors]],\n"         /* 18: 8 */
                                     "  ]\n";

static int parse(const char *text, int nc, struct trn_model **m, char *err, size_t cap)
{
    struct trn_model_opts o;
    trn_model_opts_default(&o);
    o.nc = nc;
    *m = NULL;
    err[0] = '\0';
    return trn_model_parse(text, strlen(text), "bad.yaml", &o, m, err, cap);
}

/* Replace the first occurrence of `from` in tiny_head with `to`. */
static char *edit(const char *from, const char *to)
{
    const char *at = strstr(tiny_head, from);
    if (!at) {
        printf("Bail out! edit: '%s' not in the test model\n", from);
        exit(99);
    }
    const size_t n = strlen(tiny_head) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(at - tiny_head), tiny_head, to, at + strlen(from));
    return s;
}

/* Edit the model, parse it, expect rc and a message holding every one of the needles. */
static void refused(const char *from, const char *to, int want_rc, const char *n1, const char *n2,
                    const char *what)
{
    char *text = edit(from, to);
    struct trn_model *m;
    char err[512];
    const int rc = parse(text, 0, &m, err, sizeof err);
    const bool good = rc == want_rc && !m && strstr(err, n1) && (!n2 || strstr(err, n2));
    if (!ok(good, "%s", what)) tap_diag("rc %d (%s), message: %s", rc, trn_strerror(rc), err);
    trn_model_destroy(m);
    free(text);
}

static void test_valid(void)
{
    struct trn_model *m;
    char err[512];
    int rc = parse(tiny_head, 0, &m, err, sizeof err);
    if (!ok(rc == 0, "the tiny model parses")) {
        tap_diag("%s", err);
        return;
    }
    const struct trn_model_info *I = trn_model_info(m);
    is_int(I->n_layers, 9, "9 rows");
    is_int(I->nl, 2, "2 levels");
    ok(I->stride[0] == 4 && I->stride[1] == 8, "strides 4, 8 from the probe");
    is_int(trn_model_layer(m, 6)->c_out, 96, "Concat sums 64 + 32");
    ok(trn_model_layer(m, 2)->shortcut && !trn_model_layer(m, 7)->shortcut,
       "C3 shortcut default True, 'False' parsed");
    ok(strcmp(I->name, "bad") == 0, "summary name from the file stem (%s)", I->name);
    trn_model_destroy(m);

    /* Aliases: Upsample and torch.nn.Upsample build the same thing as nn.Upsample. */
    char *t = edit("nn.Upsample", "Upsample");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 5)->type == TRN_MOD_UPSAMPLE, "'Upsample' is nn.Upsample");
    trn_model_destroy(m);
    free(t);
    /* YAML 1.1 booleans and the string forms parse_model evaluates */
    t = edit("[32, False]", "[32, no]");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && !trn_model_layer(m, 7)->shortcut, "'no' is False (YAML 1.1)");
    trn_model_destroy(m);
    free(t);
    t = edit("[32, False]", "['32', 'False']");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && !trn_model_layer(m, 7)->shortcut && trn_model_layer(m, 7)->c_out == 32,
       "quoted '32', 'False' are eval'd as parse_model does");
    trn_model_destroy(m);
    free(t);
    /* C3 with e: printed as given, c_ = int(c2 * e) */
    t = edit("[-1, 1, C3, [32]]", "[-1, 1, C3, [32, True, 1, 0.25]]");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 2)->hidden == 8 &&
           strcmp(trn_model_layer(m, 2)->args_text, "[32, 32, 1, True, 1, 0.25]") == 0,
       "C3 e = 0.25: c_ 8, args printed [32, 32, 1, True, 1, 0.25]");
    trn_model_destroy(m);
    free(t);
}

static void test_rules(void)
{
    struct trn_model *m;
    char err[512];
    /* round(n * gd), half to even: 5 * 0.5 = 2.5 -> 2; 7 * 0.5 = 3.5 -> 4; n = 1 stays 1 */
    char *t = edit("depth_multiple: 1.0", "depth_multiple: 0.5");
    char *t2 = NULL;
    {
        const char *a = strstr(t, "[-1, 1, C3, [32]]");
        const size_t n = strlen(t) + 8;
        t2 = malloc(n);
        snprintf(t2, n, "%.*s[-1, 5, C3, [32]]%s", (int)(a - t), t,
                 a + strlen("[-1, 1, C3, [32]]"));
    }
    int rc = parse(t2, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 2)->n == 2, "n 5 x 0.5 = 2.5 rounds to 2 (banker's)");
    trn_model_destroy(m);
    free(t2);
    {
        const char *a = strstr(t, "[-1, 1, C3, [32]]");
        const size_t n = strlen(t) + 8;
        t2 = malloc(n);
        snprintf(t2, n, "%.*s[-1, 7, C3, [32]]%s", (int)(a - t), t,
                 a + strlen("[-1, 1, C3, [32]]"));
    }
    rc = parse(t2, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 2)->n == 4, "n 7 x 0.5 = 3.5 rounds to 4 (banker's)");
    trn_model_destroy(m);
    free(t2);
    free(t);

    /* make_divisible(c2 * gw, 8): 16 * 0.3 = 4.8 -> 8, 64 * 0.3 = 19.2 -> 24 */
    t = edit("width_multiple: 1.0", "width_multiple: 0.3");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 0)->c_out == 8 && trn_model_layer(m, 3)->c_out == 24,
       "make_divisible: 16 x 0.3 -> 8, 64 x 0.3 -> 24");
    trn_model_destroy(m);
    free(t);

    /* a Conv whose c2 equals no = na * (nc + 5) = 27 is not scaled */
    t = edit("width_multiple: 1.0", "width_multiple: 0.5");
    char *t3 = NULL;
    {
        const char *a = strstr(t, "[-1, 1, Conv, [64, 3, 2]]");
        const size_t n = strlen(t) + 8;
        t3 = malloc(n);
        snprintf(t3, n, "%.*s[-1, 1, Conv, [27, 3, 2]]%s", (int)(a - t), t,
                 a + strlen("[-1, 1, Conv, [64, 3, 2]]"));
    }
    rc = parse(t3, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 3)->c_out == 27, "c2 == no (27) is kept unscaled");
    trn_model_destroy(m);
    free(t3);
    free(t);

    /* Conv repeated: an nn.Sequential of copies, names model.i.j.* */
    t = edit("[-1, 1, C3, [32]]", "[-1, 3, Conv, [32, 3, 1]]");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 2)->n == 3 && trn_model_find(m, "model.2.2.conv.weight") > 0 &&
           trn_model_find(m, "model.2.conv.weight") < 0,
       "Conv x3: names model.2.0..2.conv.weight");
    trn_model_destroy(m);
    free(t);
    /* Bottleneck as a row, with a shortcut (c1 == c2) */
    t = edit("[-1, 1, C3, [32]]", "[-1, 1, Bottleneck, [32]]");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_layer(m, 2)->shortcut && trn_model_layer(m, 2)->hidden == 16 &&
           trn_model_find(m, "model.2.cv2.conv.weight") > 0,
       "Bottleneck row: c_ 16, shortcut, model.2.cv1/cv2");
    trn_model_destroy(m);
    free(t);
    /* nc override reaches Detect through the name "nc" */
    rc = parse(tiny_head, 7, &m, err, sizeof err);
    ok(rc == 0 && trn_model_info(m)->nc == 7 && trn_model_layer(m, 8)->c_out == 36,
       "nc override 7: Detect 3 x 12 outputs");
    trn_model_destroy(m);
    /* an anchor count (hyp anchors, or a yaml written so): parse_model's placeholders 0..2n-1 on
     * every level, for AutoAnchor */
    t = edit("anchors:\n  - [10,13, 16,30, 33,23]\n  - [30,61, 62,45, 59,119]\n", "anchors: 4\n");
    rc = parse(t, 0, &m, err, sizeof err);
    const struct trn_model_info *I = rc == 0 ? trn_model_info(m) : NULL;
    ok(I && I->na == 4 && I->nl == 2 && I->anchors_px[1][3][0] == 6.0f &&
           I->anchors_px[1][3][1] == 7.0f && I->anchors_px[0][0][0] == 0.0f &&
           trn_model_layer(m, 8)->c_out == 4 * I->no,
       "anchors: 4 -> 2 levels of 4 placeholder anchors (0,1 .. 6,7), Detect 4 x no outputs (%s)",
       err);
    trn_model_destroy(m);
    free(t);
    /* the trainer appends "anchors: N" to the yaml: a repeated key's last value wins */
    const size_t L = strlen(tiny_head);
    t = malloc(L + 16);
    memcpy(t, tiny_head, L);
    strcpy(t + L, "\nanchors: 5\n");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_info(m)->na == 5, "an appended anchors: 5 overrides the rows (%s)",
       err);
    trn_model_destroy(m);
    free(t);
    t = edit("[[7, 4], 1, Detect, [nc, anchors]]", "[[7, 4], 1, Detect, [nc, 3]]");
    rc = parse(t, 0, &m, err, sizeof err);
    ok(rc == 0 && trn_model_info(m)->na == 3, "Detect [nc, 3]: 3 generated anchors (%s)", err);
    trn_model_destroy(m);
    free(t);
}

static void test_errors(void)
{
    refused("[-1, 1, C3, [32, False]]", "[-1, 1, C2f, [32, False]]", -TRN_MODEL_EUNSUPPORTED,
            "bad.yaml:17: layer 7: unknown module 'C2f'", NULL,
            "unknown module: file, line, layer");
    refused("[[-1, 2], 1, Concat, [1]]", "[[-1, 30], 1, Concat, [1]]", -TRN_MODEL_ESCHEMA,
            "bad.yaml:16: layer 6:", "from 30 is out of range", "from index past the layer");
    refused("[[-1, 2], 1, Concat, [1]]", "[[-1, 6], 1, Concat, [1]]", -TRN_MODEL_ESCHEMA,
            "layer 6:", "out of range", "from naming the layer itself");
    refused("[[-1, 2], 1, Concat, [1]]", "[[-1, -9], 1, Concat, [1]]", -TRN_MODEL_ESCHEMA,
            "layer 6:", "from -9", "from -9 before layer 0");
    refused("[[-1, 1, Conv, [16, 3, 2]]", "[[-2, 1, Conv, [16, 3, 2]]", -TRN_MODEL_ESCHEMA,
            "bad.yaml:8: layer 0:", "layer 0 can only take -1", "layer 0 from -2");
    refused("[[-1, 1, Conv, [16, 3, 2]]", "[[[-1], 1, Conv, [16, 3, 2]]", -TRN_MODEL_ESCHEMA,
            "layer 0:", "not a list", "a list from for Conv");
    refused("[[-1, 2], 1, Concat, [1]]", "[-1, 1, Concat, [1]]", -TRN_MODEL_ESCHEMA,
            "layer 6:", "must be a list", "an int from for Concat");
    refused("[[-1, 2], 1, Concat, [1]]", "[[-1, 0], 1, Concat, [1]]", -TRN_MODEL_ESHAPE,
            "layer 6: Concat inputs differ", NULL, "Concat of 64x64 and 128x128 at the probe");
    refused("   [-1, 1, C3, [32]],\n", "   [-1, 1, C3, [32]], }\n", -TRN_MODEL_ESYNTAX,
            "bad.yaml:10:", "YAML syntax error", "syntax error: file:line:column");
    refused("depth_multiple: 1.0", "depth_multiple: 1.0: 2", -TRN_MODEL_ESYNTAX,
            "bad.yaml:2:", "mapping values are not allowed", "syntax error in the header");
    refused("anchors:\n  - [10,13, 16,30, 33,23]\n  - [30,61, 62,45, 59,119]\n", "anchors: 99\n",
            -TRN_MODEL_ESCHEMA, "bad.yaml:4:", "anchors per level (1..16)",
            "anchors: 99 per level is refused clearly");
    refused("  - [30,61, 62,45, 59,119]\n", "  - [30,61, 62,45]\n", -TRN_MODEL_ESCHEMA,
            "bad.yaml:6:", "same number", "ragged anchor rows");
    refused("  - [30,61, 62,45, 59,119]\n", "  - [30,61, 62,45, 59,-1]\n", -TRN_MODEL_ESCHEMA,
            "bad.yaml:6:", "positive", "negative anchor");
    refused("  - [30,61, 62,45, 59,119]\n", "", -TRN_MODEL_ESCHEMA,
            "layer 8:", "1 anchor rows for 2 inputs", "anchor rows != Detect inputs");
    refused("nc: 4\n", "nc: four\n", -TRN_MODEL_ESCHEMA, "bad.yaml:1: nc must be an integer", NULL,
            "nc not an integer");
    refused("nc: 4\n", "", -TRN_MODEL_ESCHEMA, "missing key 'nc'", NULL, "nc missing");
    refused("depth_multiple: 1.0", "depth_multiple: 1e3", -TRN_MODEL_ESCHEMA,
            "bad.yaml:2:", "depth_multiple must be a number", "'1e3' is a string in YAML 1.1");
    refused("width_multiple: 1.0", "width_multiple: -1.0", -TRN_MODEL_ESCHEMA,
            "bad.yaml:3:", "width_multiple", "negative width");
    refused("[-1, 1, C3, [32]]", "[-1, 0, C3, [32]]", -TRN_MODEL_ESCHEMA,
            "layer 2:", "number must be an integer >= 1", "number 0");
    refused("[-1, 1, C3, [32]]", "[-1, 1, C3, 32]", -TRN_MODEL_ESCHEMA,
            "layer 2:", "args must be a list", "args not a list");
    refused("[-1, 1, C3, [32]]", "[-1, 1, C3]", -TRN_MODEL_ESCHEMA,
            "bad.yaml:10: layer 2:", "[from, number, module, args]", "a row of 3 entries");
    refused("[-1, 1, C3, [32]]", "[-1, 1, C3, [thirty]]", -TRN_MODEL_ESCHEMA,
            "layer 2:", "output channels must be an integer", "channels not an integer");
    refused("[-1, 1, Conv, [64, 3, 2]]", "[-1, 1, Conv, [64, 3, 2, None, 2]]",
            -TRN_MODEL_EUNSUPPORTED, "layer 3:", "groups other than 1", "grouped Conv");
    refused("[-1, 1, Conv, [64, 3, 2]]", "[-1, 1, Conv, [64, 3, 2, None, 1, 1, False]]",
            -TRN_MODEL_EUNSUPPORTED, "layer 3:", "act other than True", "Conv without act");
    refused("[None, 2, 'nearest']", "[None, 2, 'bilinear']", -TRN_MODEL_EUNSUPPORTED,
            "bad.yaml:15: layer 5:", "nearest", "bilinear upsample");
    refused("[-1, 1, SPPF, [64, 5]]", "[-1, 1, SPPF, [64, 4]]", -TRN_MODEL_EUNSUPPORTED,
            "layer 4:", "odd", "even SPPF kernel");
    refused("[[-1, 2], 1, Concat, [1]]", "[[-1, 2], 1, Concat, [0]]", -TRN_MODEL_EUNSUPPORTED,
            "layer 6:", "dimension 1", "Concat along batch");
    refused("[[7, 4], 1, Detect, [nc, anchors]],\n  ]\n",
            "[[7, 4], 1, Detect, [nc, anchors]],\n   [-1, 1, Conv, [8, 1, 1]],\n  ]\n",
            -TRN_MODEL_EUNSUPPORTED, "layer 8:", "Detect must be the last layer",
            "Detect not last");
    refused("[[7, 4], 1, Detect, [nc, anchors]],\n", "", -TRN_MODEL_ESCHEMA,
            "the last layer must be Detect", NULL, "no Detect");
    refused("nc: 4\n", "nc: 4\nactivation: nn.LeakyReLU(0.1)\n", -TRN_MODEL_EUNSUPPORTED,
            "bad.yaml:2: activation", NULL, "another activation");
    refused("[-1, 1, C3, [32]]", "[-1, 100000, C3, [32]]", -TRN_MODEL_ESCHEMA,
            "layer 2:", "repeats", "absurd repeat count");
    refused("[-1, 1, Conv, [16, 3, 2]]", "[-1, 1, Conv, [1000000, 3, 2]]", -TRN_MODEL_ESCHEMA,
            "layer 0:", "output channels", "absurd width");
    refused("[-1, 1, C3, [32]]", "[-1, 2, C3, [16256]]", -TRN_MODEL_ESCHEMA,
            "bad.yaml:", "parameters (at most",
            "a model past the parameter cap (no allocation tried)");
    refused("[-1, 1, Conv, [64, 3, 2]]", "[-1, 3, Conv, [64, 3, 2]]", -TRN_MODEL_ESCHEMA,
            "layer 3:", "repeated 3 times", "Conv x3 changing channels");
    refused("[[-1, 2], 1, Concat, [1]]", "[[-1, 2], 2, Concat, [1]]", -TRN_MODEL_EUNSUPPORTED,
            "layer 6:", "number > 1", "Concat x2");
    refused("head:\n", "head: 5\n", -TRN_MODEL_ESCHEMA, "bad.yaml:14:", "head must be a list",
            "head not a list");

    /* whole-file shapes */
    struct trn_model *m;
    char err[512];
    is_int(parse("", 0, &m, err, sizeof err), -TRN_MODEL_ESCHEMA, "empty file");
    ok(strstr(err, "bad.yaml: empty model yaml") != NULL, "empty file message: %s", err);
    is_int(parse("- 1\n- 2\n", 0, &m, err, sizeof err), -TRN_MODEL_ESCHEMA, "a list at the top");
    is_int(parse("nc: [\n", 0, &m, err, sizeof err), -TRN_MODEL_ESYNTAX, "unterminated flow");
    ok(strstr(err, "bad.yaml:2:") != NULL, "unterminated flow names line 2: %s", err);
    ok(parse("nc: 1\nbackbone: &x [*x]\n", 0, &m, err, sizeof err) == -TRN_MODEL_ESCHEMA &&
           strstr(err, "nesting"),
       "a self-referencing alias ends at the depth limit: %s", err);
    char deep[200] = "nc: ";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    for (int i = 0; i < 40; i++)
        strcat(deep, "]");
    strcat(deep, "\n");
    ok(parse(deep, 0, &m, err, sizeof err) == -TRN_MODEL_ESCHEMA && strstr(err, "nesting"),
       "deep nesting refused: %s", err);
    is_int(trn_model_parse(NULL, 0, "x", NULL, &m, NULL, 0), -EINVAL, "NULL text: -EINVAL");
    ok(trn_model_parse(tiny_head, strlen(tiny_head), "x.yaml", NULL, &m, NULL, 0) == 0,
       "NULL opts and no err buffer are fine");
    trn_model_destroy(m);
    trn_model_destroy(NULL);
    ok(strstr(trn_strerror(-TRN_MODEL_ESYNTAX), "YAML") != NULL &&
           strstr(trn_strerror(-ENOENT), "No such file") != NULL,
       "strerror names our codes and errno");
}

static void test_files(void)
{
    struct trn_model *m = NULL;
    char err[512];
    is_int(trn_model_load("/nonexistent/yolov5s.yaml", NULL, &m, err, sizeof err), -ENOENT,
           "missing file: -ENOENT");
    ok(strstr(err, "/nonexistent/yolov5s.yaml") != NULL, "message names the path: %s", err);
    is_int(trn_model_load("/tmp", NULL, &m, err, sizeof err), -EINVAL, "a directory: -EINVAL");

    char path[] = "/tmp/test_model_yaml_XXXXXX";
    const int fd = mkstemp(path);
    char *t = edit("   [-1, 1, SPPF, [64, 5]],\n", "   [-1, 1, SPPF, [64, 5]],\n  - oops\n");
    const ssize_t w = write(fd, t, strlen(t));
    close(fd);
    free(t);
    const int rc = trn_model_load(path, NULL, &m, err, sizeof err);
    char want[128];
    snprintf(want, sizeof want, "%s:13:", path);
    ok(w > 0 && rc == -TRN_MODEL_ESYNTAX && strstr(err, want), "syntax error in a file: %s", err);
    unlink(path);

    char found[1024];
    is_int(trn_model_cfg_find("yolov5s", TRN_TEST_MODELS_DIR, found, sizeof found), 0,
           "cfg 'yolov5s' is found in the models dir");
    ok(strstr(found, "/yolov5s.yaml") != NULL, "found %s", found);
    is_int(trn_model_cfg_find("yolov5n.yaml", TRN_TEST_MODELS_DIR, found, sizeof found), 0,
           "cfg 'yolov5n.yaml' is found");
    is_int(trn_model_cfg_find("yolov9z", TRN_TEST_MODELS_DIR, found, sizeof found), -ENOENT,
           "unknown cfg: -ENOENT");
    is_int(trn_model_cfg_find("/no/such/yolov5s.yaml", TRN_TEST_MODELS_DIR, found, sizeof found),
           -ENOENT, "a path is not searched for");
    is_int(trn_model_cfg_find("yolov5s", TRN_TEST_MODELS_DIR, found, 8), -ENAMETOOLONG,
           "short buffer: -ENAMETOOLONG");
}

int main(void)
{
    test_valid();
    test_rules();
    test_errors();
    test_files();
    return tap_done();
}
