/*
 * The conv plan file of a GPU run (trainer/train/plans.h), without a GPU: which file is read,
 * which errors a user sees (a missing file without --cudnn-tune, a bad file naming its line), and
 * what is written where (the tuned file whole, the run directory's copy of the used entries,
 * nothing for a run that planned nothing, as a CPU run). The entries stand in for what a CUDA
 * context would have put there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plans.h"
#include "tap.h"

static struct kern_plan_key key(int c_in)
{
    struct kern_plan_key k;
    memset(&k, 0, sizeof k);
    kern_plan_gpu_name(k.gpu, "NVIDIA H200");
    k.sms = 132, k.cudnn = 91300, k.op = KERN_PLAN_FILTER;
    kern_conv2d_init(&k.d, 64, c_in, 80, 80, 64, 3, 1, 1);
    k.dtype = KERN_DT_BF16, k.layout = KERN_LAYOUT_NHWC;
    return k;
}

static int lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char b[600];
    int n = 0;
    while (fgets(b, sizeof b, f))
        n += b[0] != '#' && b[0] != '\n';
    fclose(f);
    return n;
}

int main(void)
{
    char dir[] = "/tmp/test_plans.XXXXXX";
    if (!mkdtemp(dir)) return 99;
    char file[512], copy[600], err[512];
    snprintf(file, sizeof file, "%s/plans.txt", dir);
    snprintf(copy, sizeof copy, "%s/%s", dir, TRN_PLANS_COPY);
    struct trn_plans p;

    ok(trn_plans_open(&p, file, false, err, sizeof err) == -ENOENT && strstr(err, "--cudnn-tune") &&
           strstr(err, file) && !p.table,
       "--cudnn-plan of a missing file: refused, naming it and --cudnn-tune: %s", err);

    ok(trn_plans_open(&p, NULL, false, err, sizeof err) == 0 && p.table, "no plan file: a table");
    ok(trn_plans_write(&p, dir, err, sizeof err) == 0 && access(copy, F_OK) != 0,
       "nothing planned (a CPU run): no copy written");
    trn_plans_close(&p);

    /* a tuning run: the file does not exist yet, the run makes it */
    ok(trn_plans_open(&p, file, true, err, sizeof err) == 0, "--cudnn-tune of a new file: opens");
    struct kern_plan_val v = { 1, 1, 1, KERN_PLAN_SRC_TUNED };
    for (int c = 16; c <= 64; c *= 2) {
        const struct kern_plan_key k = key(c);
        kern_plan_put(p.table, &k, &v);
    }
    const uint64_t h = kern_plan_hash(p.table);
    ok(trn_plans_write(&p, dir, err, sizeof err) == 0 && lines(file) == 3 && lines(copy) == 3,
       "writes the plan file and the run's copy (3 entries each)");
    trn_plans_close(&p);

    /* a later run reads it; the copy holds only what that run used */
    ok(trn_plans_open(&p, file, false, err, sizeof err) == 0 && kern_plan_count(p.table) == 3,
       "a later run reads the 3 entries");
    const struct kern_plan_key k = key(32);
    struct kern_plan_val g;
    ok(kern_plan_get(p.table, &k, &g) == 0 && g.src == KERN_PLAN_SRC_TUNED, "and finds its key");
    ok(trn_plans_write(&p, dir, err, sizeof err) == 0 && lines(copy) == 1 && lines(file) == 3,
       "its copy lists the 1 entry it used; the plan file is left alone without --cudnn-tune");
    ok(kern_plan_hash(p.table) != h, "a run that used fewer entries has another hash");
    trn_plans_close(&p);

    /* a damaged file: refused with its line */
    FILE *f = fopen(file, "a");
    fputs("NVIDIA_H200 132 91300 fwd 64 3 640 640 16 6 6 2 2 2 2 0 bf16 nhwc 1 1 1\n", f);
    fclose(f);
    ok(trn_plans_open(&p, file, false, err, sizeof err) == -EINVAL && strstr(err, ":6:") &&
           !p.table,
       "a bad line: refused, naming the file and line: %s", err);
    trn_plans_close(&p);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 99;
    return tap_done();
}
