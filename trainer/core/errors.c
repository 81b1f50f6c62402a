/* The trainer's error registry (errors.h): one table of messages for the pinned codes, the
 * lower libraries' strerrors for theirs. */
#include "errors.h"

#include <string.h>

#include "ffr.h"
#include "kern.h"

static const struct {
    int code;
    const char *msg;
} messages[] = {
    { TRN_MODEL_ESYNTAX, "malformed YAML in the model file" },
    { TRN_MODEL_ESCHEMA, "model yaml has the wrong structure, types or values" },
    { TRN_MODEL_EUNSUPPORTED, "model yaml uses a module or option that is not supported" },
    { TRN_MODEL_ESHAPE, "the model cannot take this image size" },
    { TRN_MODEL_EONEDNN, "oneDNN refused or failed a primitive" },
    { TRN_LOSS_ETARGET, "bad target row (non-finite, image or class out of range)" },
    { TRN_CKPT_EBAD, "not a valid checkpoint for this model" },
    { TRN_PT_EZIP, "malformed zip archive" },
    { TRN_PT_ECRC, "zip entry CRC mismatch" },
    { TRN_PT_EPICKLE, "malformed pickle" },
    { TRN_PT_ELIMIT, "checkpoint exceeds a reader limit" },
    { TRN_PT_EUNSUPPORTED, "unsupported checkpoint feature" },
    { TRN_PT_ESTRUCT, "checkpoint lacks the expected structure" },
    { TRN_PT_EMISMATCH, "checkpoint does not match the model" },
    { TRN_EXPORT_EPROTOBUF, "protobuf-c could not serialise the model" },
    { TRN_EXPORT_EMODEL, "the model has something the exporter cannot express" },
};

const char *trn_strerror(int rc)
{
    if (rc >= 0) return "success";
    const int c = -rc;
    if (c < 1000) return strerror(c);
    if (c < 1100) return ffr_strerror(rc);
    if (c >= 2000 && c < 2100) return kern_strerror(rc);
    for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++)
        if (messages[i].code == c) return messages[i].msg;
    return "unknown error code";
}
