/* ffr.h compiles on its own, first (style guide rule 9), and its pinned codes keep their values. */
#include "ffr.h"

#include "tap.h"

int main(void)
{
    is_int(FFR_EBADMAGIC, 1001, "FFR_EBADMAGIC is pinned");
    is_int(FFR_ETOOBIG, 1009, "FFR_ETOOBIG is pinned");
    ok(ffr_strerror(-FFR_ECHECKSUM)[0] != '\0', "every code has a name");
    ok(ffr_strerror(-2) != ffr_strerror(-FFR_ECORRUPT), "errno values fall back to strerror");
    return tap_done();
}
