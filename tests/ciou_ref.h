/*
 * The loss tests' oracle for one box pair: ultralytics' bbox_iou(xywh, CIoU=True) in double.
 * alpha (v / (v - iou + 1 + eps)) is a constant in PyTorch (computed under no_grad), so finite
 * differences must hold it too: with a struct tu_alpha in mode 1 each call records its alpha, in
 * mode 2 it replays them in order (n counts the calls; reset it to replay again); mode 0 or a
 * NULL pointer computes it. Header-only; tests/ is on every test's include path.
 */
#ifndef TESTS_CIOU_REF_H
#define TESTS_CIOU_REF_H

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

struct tu_alpha {
    int mode; /* 0 compute, 1 record, 2 replay */
    int n;    /* calls so far */
    int cap;  /* entries of rec */
    double *rec;
};

static inline double tu_ciou_ref(const double *p, const double *q, struct tu_alpha *a)
{
    const double eps = 1e-7;
    const double b1x1 = p[0] - p[2] / 2, b1x2 = p[0] + p[2] / 2, b1y1 = p[1] - p[3] / 2,
                 b1y2 = p[1] + p[3] / 2;
    const double b2x1 = q[0] - q[2] / 2, b2x2 = q[0] + q[2] / 2, b2y1 = q[1] - q[3] / 2,
                 b2y2 = q[1] + q[3] / 2;
    const double iw = fmax(fmin(b1x2, b2x2) - fmax(b1x1, b2x1), 0.0);
    const double ih = fmax(fmin(b1y2, b2y2) - fmax(b1y1, b2y1), 0.0);
    const double inter = iw * ih, uni = p[2] * p[3] + q[2] * q[3] - inter + eps;
    const double iou = inter / uni;
    const double cw = fmax(b1x2, b2x2) - fmin(b1x1, b2x1), ch = fmax(b1y2, b2y2) - fmin(b1y1, b2y1);
    const double c2 = cw * cw + ch * ch + eps;
    const double dx = b2x1 + b2x2 - b1x1 - b1x2, dy = b2y1 + b2y2 - b1y1 - b1y2;
    const double rho2 = (dx * dx + dy * dy) / 4.0;
    const double dd = atan(q[2] / q[3]) - atan(p[2] / p[3]);
    const double v = 4.0 / (M_PI * M_PI) * dd * dd;
    double alpha = v / (v - iou + (1 + eps));
    if (a && a->mode == 1 && a->n < a->cap) a->rec[a->n++] = alpha;
    if (a && a->mode == 2 && a->n < a->cap) alpha = a->rec[a->n++];
    return iou - (rho2 / c2 + v * alpha);
}

#endif
