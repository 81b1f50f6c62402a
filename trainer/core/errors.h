/*
 * errors: the trainer's one error registry. Every trainer call returns >= 0 or a negative code,
 * and trn_strerror() names any code any layer returns. The ranges (codes are returned negated):
 *
 *   1 .. 999       errno values                        strerror
 *   1000 .. 1099   ffr: record files                   ffr_strerror (ffr.h)
 *   2000 .. 2099   kern: the ops                       kern_strerror (kern.h)
 *   4600 .. 4699   model yaml                          TRN_MODEL_E*
 *   4700 .. 4799   loss targets                        TRN_LOSS_E*
 *   4800 .. 4899   our checkpoint                      TRN_CKPT_E*
 *   4900 .. 4999   .pt import                          TRN_PT_E*
 *   5100 .. 5199   export                              TRN_EXPORT_E*
 *
 * A new module that needs codes of its own takes the next free hundred here, with its messages
 * in errors.c; it does not write a strerror of its own. Four modules give some errno values a
 * narrower meaning and keep a strerror that names those first, then falls back to this one:
 * trn_aug_strerror (ENOSPC, ENOTSUP), trn_dist_strerror (ETIMEDOUT, ECONNRESET, EPROTO, ENOTSUP),
 * trn_optim_strerror (ENOTSUP), trn_loss_strerror (E2BIG, ENOTSUP). All codes are pinned once
 * released: tests and scripts compare them.
 */
#ifndef TRN_ERRORS_H
#define TRN_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

/* model yaml (model.h) */
#define TRN_MODEL_ESYNTAX      4601 /* malformed YAML (message: file:line:column) */
#define TRN_MODEL_ESCHEMA      4602 /* well-formed YAML, wrong structure, type or value */
#define TRN_MODEL_EUNSUPPORTED 4603 /* a module or option we do not implement (yet) */
#define TRN_MODEL_ESHAPE       4604 /* an image size the model cannot take (Concat mismatch) */
#define TRN_MODEL_EONEDNN      4605 /* oneDNN refused or failed a primitive (net.h cpu_engine) */

/* loss (loss.h) */
#define TRN_LOSS_ETARGET 4711 /* a target row with bad values */

/* our checkpoint (ckpt.h) */
#define TRN_CKPT_EBAD 4801 /* does not parse, or does not fit the model */

/* .pt import (ptload.h) */
#define TRN_PT_EZIP         4901 /* not a zip archive, or a malformed one */
#define TRN_PT_ECRC         4902 /* an entry's bytes do not match its CRC-32 */
#define TRN_PT_EPICKLE      4903 /* malformed pickle (bad opcode argument, stack misuse) */
#define TRN_PT_ELIMIT       4904 /* a TRN_PT_MAX_* limit was exceeded */
#define TRN_PT_EUNSUPPORTED 4905 /* valid but not supported: an opcode, a compression, a dtype */
#define TRN_PT_ESTRUCT      4906 /* readable, but not the structure asked for (no such key...) */
#define TRN_PT_EMISMATCH    4907 /* the checkpoint does not map onto the model */

/* export (export.h) */
#define TRN_EXPORT_EPROTOBUF 5101 /* protobuf-c could not serialise the model */
#define TRN_EXPORT_EMODEL    5102 /* the model has something the exporter cannot express */

/* The message of any code a trainer call returns ("success" for rc >= 0). Static storage;
 * thread-safe. */
const char *trn_strerror(int rc);

#ifdef __cplusplus
}
#endif

#endif
