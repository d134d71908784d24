/* probe: the checks the vetto-shim end-to-end tests run inside containers whose image has
 * only busybox (which cannot call ptrace). Built static by tests/oci/e2e.sh.
 *   probe ptrace   -> "ptrace: allowed" (exit 0) or "ptrace: <strerror>" (exit 1)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "ptrace") == 0) {
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0) {
            printf("ptrace: allowed\n");
            return 0;
        }
        printf("ptrace: %s\n", strerror(errno));
        return 1;
    }
    fprintf(stderr, "usage: probe ptrace\n");
    return 2;
}
