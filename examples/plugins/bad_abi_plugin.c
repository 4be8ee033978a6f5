/* bad_abi_plugin.c: a plugin built for a future ABI (2), which roifs must refuse at mount time
 * with a clear message; used by the tests. */
#include <roifs/plugin.h>

static int never_called(void *state, const struct roifs_roi *roi, const void *in, void *out,
                        char *err, size_t errlen)
{
    (void)state, (void)roi, (void)in, (void)out, (void)err, (void)errlen;
    return 1;
}

static const struct roifs_plugin bad_plugin = {
    .abi = ROIFS_PLUGIN_ABI + 1,
    .name = "bad-abi",
    .process = never_called,
};

const struct roifs_plugin *roifs_plugin(void)
{
    return &bad_plugin;
}
