// statx(STATX_DIOALIGN) through the raw system call, with the kernel's own struct: glibc's
// struct statx predates the DIO fields on some systems. Kept apart from <sys/stat.h>, which
// clashes with <linux/stat.h>.
#include <linux/fcntl.h>
#include <linux/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "os/alignment.hpp"
#include "os/fault_hook.hpp"

namespace ferry::detail {

direct_alignment query_direct_alignment(int fd) {
    direct_alignment a;
    struct statx sx {};
    if (sys::inject("statx")) return a;  // as a kernel without the call: the 4096 fallback
    long r = ::syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx);
    if (r == 0 && (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_mem_align != 0 &&
        sx.stx_dio_offset_align != 0) {
        a.memory = sx.stx_dio_mem_align;
        a.offset = sx.stx_dio_offset_align;
        a.from_statx = true;
    }
    return a;
}

}  // namespace ferry::detail
