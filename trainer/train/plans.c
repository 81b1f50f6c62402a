/*
 * The conv plan file of a GPU run (plans.h). The table and its file format are the kernels'
 * (kern_plan.c); this file only decides which file is read and written, and when.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "plans.h"

int trn_plans_open(struct trn_plans *p, const char *path, bool tune, char *err, size_t err_cap)
{
    memset(p, 0, sizeof(*p));
    p->path = path && path[0] ? path : NULL;
    p->tune = tune;
    int rc = kern_plan_create(&p->table);
    if (rc < 0) {
        snprintf(err, err_cap, "plan table: %s", strerror(-rc));
        return rc;
    }
    if (!p->path) return 0;
    char e[512] = "";
    rc = kern_plan_load(p->table, p->path, e, sizeof e);
    if (rc == -ENOENT && tune) return 0; /* this run writes it */
    if (rc == -ENOENT) {
        snprintf(err, err_cap, "--cudnn-plan %s: no such file (write one with --cudnn-tune)",
                 p->path);
        trn_plans_close(p);
        return rc;
    }
    if (rc < 0) {
        snprintf(err, err_cap, "--cudnn-plan %s", e);
        trn_plans_close(p);
        return rc;
    }
    return 0;
}

int trn_plans_write(struct trn_plans *p, const char *run_dir, char *err, size_t err_cap)
{
    if (!p->table || kern_plan_hash(p->table) == 0) return 0; /* nothing planned: a CPU run */
    char e[512] = "";
    int rc;
    if (p->tune && p->path && (rc = kern_plan_save(p->table, p->path, 0, e, sizeof e)) < 0) {
        snprintf(err, err_cap, "--cudnn-tune: writing the plan file %s", e);
        return rc;
    }
    if (run_dir && run_dir[0]) {
        char copy[4200];
        snprintf(copy, sizeof copy, "%s/%s", run_dir, TRN_PLANS_COPY);
        if ((rc = kern_plan_save(p->table, copy, 1, e, sizeof e)) < 0) {
            snprintf(err, err_cap, "the run's plan copy %s", e);
            return rc;
        }
    }
    return 0;
}

void trn_plans_close(struct trn_plans *p)
{
    if (!p) return;
    kern_plan_destroy(p->table);
    p->table = NULL;
}
