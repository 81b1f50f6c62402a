/*
 * Per-pixel operations of augment.h: augment_hsv, mixup and the flips. The pixels are the kern
 * library's ops on the process-wide CPU context (kern_ref_aug_hsv, _mixup, _flip; their
 * arithmetic, OpenCV 4.x's 8-bit cvtColor and numpy's casts, is described in
 * kernels/ref/kern_augment.c); the labels of the flips are here.
 */
#include "augment.h"

void trn_aug_hsv(uint8_t *rgb, int w, int h, const struct trn_aug_hsv_draws *d)
{
    if (!rgb || !d || !d->apply || w < 1 || h < 1) return;
    struct kern_ctx *const k = trn_aug_cpu_ctx();
    if (!k) return;
    struct kern_aug_hsv_lut lut;
    kern_aug_hsv_lut_init(&lut, d->gain);
    (void)kern_ref_aug_hsv(k, rgb, w, h, &lut); /* arguments checked above: cannot fail */
}

void trn_aug_mixup(uint8_t *img, const uint8_t *img2, size_t n, double r)
{
    struct kern_ctx *const k = trn_aug_cpu_ctx();
    if (!k) return;
    (void)kern_ref_aug_mixup(k, img, img2, n, r);
}

void trn_aug_flip_lr(uint8_t *img, int w, int h, float *rows, int n)
{
    struct kern_ctx *const k = img && w > 0 && h > 0 ? trn_aug_cpu_ctx() : NULL;
    if (k) (void)kern_ref_aug_flip(k, img, w, h, 1, 0);
    for (int i = 0; i < n; i++)
        rows[5 * i + 1] = 1 - rows[5 * i + 1];
}

void trn_aug_flip_ud(uint8_t *img, int w, int h, float *rows, int n)
{
    struct kern_ctx *const k = img && w > 0 && h > 0 ? trn_aug_cpu_ctx() : NULL;
    if (k) (void)kern_ref_aug_flip(k, img, w, h, 0, 1);
    for (int i = 0; i < n; i++)
        rows[5 * i + 2] = 1 - rows[5 * i + 2];
}
