/* escape-probe: the attacks of vetto's escape suite that a shell cannot make. Built static by
 * tests/escape/suite.py (gcc -static), so it runs in `vetto run` and in a busybox container.
 *
 * Every attempt prints one line "NAME: RESULT" where RESULT is "allowed" (the call succeeded:
 * for an attack, that is an escape), an errno name ("EPERM"), "killed by SIGSYS", or a word
 * the subcommand documents. Attempts run in a forked child, so a seccomp kill or a crash is
 * reported instead of ending the probe. The suite, not the probe, decides what is expected.
 *
 *   escape-probe sys NAME...          one syscall attack per NAME (see `attacks` below)
 *   escape-probe setid FILE           every mode-setting call that could set S_ISUID/S_ISGID
 *   escape-probe tcp ADDR PORT        connect(); "connected" or the errno
 *   escape-probe udp ADDR PORT        sendto() of a DNS query for escape.test
 *   escape-probe unix PATH | abstract NAME
 *   escape-probe proxy PORT LINE      send LINE\r\n\r\n to 127.0.0.1:PORT, print the status line
 *   escape-probe socks PORT ATYP HOST DPORT  a SOCKS5 CONNECT (ATYP 1, 3 or 4), print the reply code
 *   escape-probe fdwalk               every inherited fd and the cwd: can ".." reach the host's root?
 *   escape-probe mmapw FILE           a shared writable mapping of a file opened read-only
 *   escape-probe reopen FILE          O_PATH, then reopen through /proc/self/fd for writing
 *   escape-probe openw FILE           open(FILE, O_WRONLY) without truncating (never writes)
 *   escape-probe handle FILE          open_by_handle_at() with the handle bytes in FILE
 *   escape-probe mkhandle FILE OUT    (on the host) write FILE's handle to OUT for `handle`
 *   escape-probe kill PID | killall   kill(PID, SIGKILL); kill(-1, SIGKILL)
 *   escape-probe forkbomb N           fork up to N children that sleep; print how many
 *   escape-probe alloc MIB            touch MIB MiB; print how far it got
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#define X32 0x40000000

static const char *errname(int e) {
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

/* r < 0: the errno; else "allowed". */
static void say(const char *name, long r) {
    if (r == -2)
        printf("%s: contained\n", name);
    else if (r < 0)
        printf("%s: %s\n", name, errname(errno));
    else
        printf("%s: allowed\n", name);
}

static int g_arg_ok;
static const char *g_arg;

/* One attack; returns the syscall's result (errno set on failure). */
static long attack(const char *n) {
    const char *a = g_arg ? g_arg : ".env";
    if (!strcmp(n, "ptrace_attach1")) return ptrace(PTRACE_ATTACH, 1, 0, 0);
    if (!strcmp(n, "ptrace_seize1")) return ptrace(PTRACE_SEIZE, 1, 0, 0);
    if (!strcmp(n, "process_vm_readv1")) {
        char buf[16];
        struct iovec l = {buf, sizeof buf}, r = {(void *)0x400000, sizeof buf};
        return process_vm_readv(1, &l, 1, &r, 1, 0);
    }
    if (!strcmp(n, "pidfd_getfd1")) {
        long pfd = syscall(SYS_pidfd_open, 1, 0);
        if (pfd < 0) return pfd;
        long r = -1;
        for (int fd = 0; fd < 64; fd++) {
            r = syscall(SYS_pidfd_getfd, pfd, fd, 0);
            if (r >= 0) return r;
            if (errno != EBADF) return r;
        }
        return r;
    }
    if (!strcmp(n, "proc1_mem")) {
        int fd = open("/proc/1/mem", O_RDONLY);
        if (fd < 0) return -1;
        char b[8];
        return pread(fd, b, sizeof b, 0x400000) < 0 && errno != EIO ? -1 : 0;
    }
    if (!strcmp(n, "proc1_environ")) {
        int fd = open("/proc/1/environ", O_RDONLY);
        if (fd < 0) return -1;
        char b[8];
        return read(fd, b, sizeof b);
    }
    if (!strcmp(n, "io_uring")) {
        char p[120] = {0};
        return syscall(SYS_io_uring_setup, 4, p);
    }
    if (!strcmp(n, "userfaultfd")) return syscall(SYS_userfaultfd, 0);
    if (!strcmp(n, "bpf")) {
        union bpf_attr at;
        memset(&at, 0, sizeof at);
        at.map_type = BPF_MAP_TYPE_ARRAY;
        at.key_size = 4;
        at.value_size = 4;
        at.max_entries = 1;
        return syscall(SYS_bpf, BPF_MAP_CREATE, &at, sizeof at);
    }
    if (!strcmp(n, "perf_event_open")) {
        struct perf_event_attr pe;
        memset(&pe, 0, sizeof pe);
        pe.type = PERF_TYPE_SOFTWARE;
        pe.size = sizeof pe;
        pe.config = PERF_COUNT_SW_CPU_CLOCK;
        return syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0);
    }
    if (!strcmp(n, "add_key")) return syscall(SYS_add_key, "user", "escape", "x", 1, -3 /* session */);
    if (!strcmp(n, "keyctl")) return syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 1);
    if (!strcmp(n, "kexec_load")) return syscall(SYS_kexec_load, 0, 0, 0, 0);
    if (!strcmp(n, "kexec_file_load")) return syscall(SYS_kexec_file_load, -1, -1, 0, "", 2);
    if (!strcmp(n, "init_module")) return syscall(SYS_init_module, "", 0, "");
    if (!strcmp(n, "finit_module")) {
        int fd = open("/proc/self/exe", O_RDONLY);
        return syscall(SYS_finit_module, fd, "", 0);
    }
    if (!strcmp(n, "delete_module")) return syscall(SYS_delete_module, "overlay", O_NONBLOCK);
#ifdef __x86_64__
    if (!strcmp(n, "x32_getpid")) return syscall(X32 | 39);
    if (!strcmp(n, "x32_unshare")) return syscall(X32 | SYS_unshare, CLONE_NEWUSER);
    if (!strcmp(n, "x32_mount")) return syscall(X32 | SYS_mount, "none", "/tmp", "tmpfs", 0, 0);
    if (!strcmp(n, "int80_getpid") || !strcmp(n, "int80_unshare") || !strcmp(n, "int80_mount")) {
        long nr = !strcmp(n, "int80_getpid") ? 20 : !strcmp(n, "int80_unshare") ? 310 : 21;
        long r;
        static const char none[] = "none", tmp[] = "/tmp";
        /* i386 ABI: eax = nr, ebx, ecx, edx = args (pointers must fit 32 bits; static
           strings in a non-PIE static binary do). */
        __asm__ volatile("int $0x80"
                         : "=a"(r)
                         : "a"(nr), "b"((long)(nr == 21 ? (long)none : 0x10000000)),
                           "c"((long)(nr == 21 ? (long)tmp : 0)), "d"(0L)
                         : "memory");
        if (r < 0 && r > -4096) {
            errno = (int)-r;
            return -1;
        }
        return r;
    }
#endif
    if (!strcmp(n, "umount")) return umount2(a, MNT_DETACH);
    if (!strcmp(n, "umount_proc")) return umount2("/proc", MNT_DETACH);
    if (!strcmp(n, "fsopen")) return syscall(SYS_fsopen, "tmpfs", 0);
    if (!strcmp(n, "open_tree")) return syscall(SYS_open_tree, AT_FDCWD, a, 1 /* OPEN_TREE_CLONE */);
    if (!strcmp(n, "move_mount")) {
        int fd = open("/tmp", O_PATH | O_DIRECTORY);
        return syscall(SYS_move_mount, fd, "", AT_FDCWD, a, 4 /* F_EMPTY_PATH */);
    }
    if (!strcmp(n, "mount_setattr")) {
        uint64_t at[4] = {0, 1 /* MOUNT_ATTR_RDONLY to clear */, 0, 0};
        return syscall(SYS_mount_setattr, AT_FDCWD, a, 0, at, 32);
    }
    if (!strcmp(n, "mount_bind")) return mount("/tmp", a, NULL, MS_BIND, NULL);
    if (!strcmp(n, "mount_remount_rw")) return mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL);
    if (!strcmp(n, "mount_proc")) return mount("proc", "/tmp", "proc", 0, NULL);
    if (!strcmp(n, "mount_tmpfs")) return mount("none", a, "tmpfs", 0, NULL);
    if (!strcmp(n, "pivot_root")) return syscall(SYS_pivot_root, "/tmp", "/tmp");
    if (!strcmp(n, "chroot")) return chroot("/tmp");
    if (!strcmp(n, "chroot_escape")) {
        /* The classic: chroot into a subdirectory, climb out with .., chroot to where that
           leads. Allowed (CAP_SYS_CHROOT) it must still end inside the container's root. */
        mkdir("/tmp/chroot-escape", 0700);
        if (chroot("/tmp/chroot-escape") < 0) return -1;
        for (int i = 0; i < 64; i++) (void)chdir("..");
        if (chroot(".") < 0) return -1;
        struct stat st;
        if (stat("/var", &st) == 0 || stat("/home", &st) == 0 || stat("/srv", &st) == 0) return 0;
        return -2;
    }
    if (!strcmp(n, "unshare_user")) return unshare(CLONE_NEWUSER);
    if (!strcmp(n, "unshare_mnt")) return unshare(CLONE_NEWNS);
    if (!strcmp(n, "unshare_net")) return unshare(CLONE_NEWNET);
    if (!strcmp(n, "userns_then_umount")) {
        if (unshare(CLONE_NEWUSER) < 0) return -1;
        if (unshare(CLONE_NEWNS) < 0) return -1;
        return umount2(a, MNT_DETACH);
    }
    if (!strcmp(n, "clone3_userns")) {
        struct {
            uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
        } ca;
        memset(&ca, 0, sizeof ca);
        ca.flags = CLONE_NEWUSER | CLONE_NEWNS;
        ca.exit_signal = SIGCHLD;
        long r = syscall(SYS_clone3, &ca, sizeof ca);
        if (r == 0) _exit(0);
        if (r > 0) waitpid((pid_t)r, NULL, 0);
        return r;
    }
    if (!strcmp(n, "setns_mnt1")) {
        int fd = open("/proc/1/ns/mnt", O_RDONLY);
        if (fd < 0) return -1;
        return setns(fd, 0);
    }
    if (!strcmp(n, "swapon")) return syscall(SYS_swapon, "/tmp/x", 0);
    if (!strcmp(n, "reboot")) return syscall(SYS_reboot, 0xfee1dead, 672274793, 0xCDEF0123 /* CAD_OFF */, 0);
    if (!strcmp(n, "settimeofday")) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return clock_settime(CLOCK_REALTIME, &ts);
    }
    if (!strcmp(n, "sethostname")) return sethostname("escaped", 7);
#ifdef __x86_64__
    if (!strcmp(n, "iopl")) return syscall(SYS_iopl, 3);
    if (!strcmp(n, "ioperm")) return syscall(SYS_ioperm, 0x80, 1, 1);
#endif
    if (!strcmp(n, "acct")) return acct("/tmp/acct");
    if (!strcmp(n, "tiocsti")) {
        /* Push a command into the terminal's input queue, for whoever reads it next. */
        const char *cmd = "echo TIOCSTI-INJECTED\n";
        long r = 0;
        for (const char *c = cmd; *c && r == 0; c++) r = ioctl(0, TIOCSTI, c);
        return r;
    }
    if (!strcmp(n, "tioclinux")) {
        char sub = 2; /* TIOCL_SETSEL: pastes through the console */
        return ioctl(0, TIOCLINUX, &sub);
    }
    if (!strcmp(n, "mknod_char")) return mknod("escape-mem", S_IFCHR | 0666, makedev(1, 1));
    if (!strcmp(n, "mknod_block")) return mknod("escape-sda", S_IFBLK | 0666, makedev(8, 0));
    if (!strcmp(n, "dev_mem")) return open("/dev/mem", O_RDONLY);
    if (!strcmp(n, "dev_kmsg")) return open("/dev/kmsg", O_RDONLY);
    if (!strcmp(n, "setuid0")) return setuid(0) < 0 ? -1 : (getuid() == 0 && geteuid() == 0 ? 0 : (errno = EPERM, -1));
    if (!strcmp(n, "sock_vsock")) {
        int s = socket(AF_VSOCK, SOCK_STREAM, 0);
        if (s < 0) return -1;
        struct sockaddr_vm vm = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_HOST, .svm_port = 1024};
        return connect(s, (struct sockaddr *)&vm, sizeof vm);
    }
    if (!strcmp(n, "sock_packet")) return socket(AF_PACKET, SOCK_RAW, htons(3));
    if (!strcmp(n, "sock_raw")) return socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    if (!strcmp(n, "sock_alg")) return socket(AF_ALG, SOCK_SEQPACKET, 0);
    if (!strcmp(n, "sock_key")) return socket(AF_KEY, SOCK_RAW, 2);
    if (!strcmp(n, "sock_bluetooth")) return socket(AF_BLUETOOTH, SOCK_RAW, 0);
    if (!strcmp(n, "sock_xdp")) return socket(44 /* AF_XDP */, SOCK_RAW, 0);
    if (!strcmp(n, "sock_tipc")) return socket(AF_TIPC, SOCK_RDM, 0);
    if (!strcmp(n, "sock_rds")) return socket(AF_RDS, SOCK_SEQPACKET, 0);
    if (!strcmp(n, "sock_can")) return socket(AF_CAN, SOCK_RAW, 1);
    if (!strcmp(n, "sock_appletalk")) return socket(AF_APPLETALK, SOCK_DGRAM, 0);
    if (!strcmp(n, "netlink_addr")) {
        /* RTM_NEWADDR 10.0.0.1/8 on lo: a route or address the sandbox should not add. */
        int s = socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */);
        if (s < 0) return -1;
        struct {
            struct { uint32_t len; uint16_t type, flags; uint32_t seq, pid; } h;
            struct { uint8_t family, prefixlen, flags, scope; uint32_t index; } ifa;
            struct { uint16_t len, type; } rta;
            uint8_t addr[4];
        } req;
        memset(&req, 0, sizeof req);
        req.h.len = sizeof req;
        req.h.type = 20; /* RTM_NEWADDR */
        req.h.flags = 1 | 4 | 0x400 | 0x200; /* REQUEST | ACK | CREATE | EXCL */
        req.ifa.family = AF_INET;
        req.ifa.prefixlen = 8;
        req.ifa.index = 1;
        req.rta.len = 8;
        req.rta.type = 2; /* IFA_LOCAL */
        req.addr[0] = 127; req.addr[1] = 9; req.addr[2] = 9; req.addr[3] = 9;
        if (send(s, &req, sizeof req, 0) < 0) return -1;
        char buf[512];
        long n2 = recv(s, buf, sizeof buf, 0);
        if (n2 < 36) return -1;
        int32_t e;
        memcpy(&e, buf + 16, 4);
        if (e < 0) { errno = -e; return -1; }
        return 0;
    }
    fprintf(stderr, "escape-probe: unknown attack %s\n", n);
    exit(2);
}

static int cmd_sys(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        char name[128];
        snprintf(name, sizeof name, "%s", argv[i]);
        char *eq = strchr(name, '=');
        g_arg = NULL;
        if (eq) { *eq = 0; g_arg = argv[i] + (eq - name) + 1; }
        g_arg_ok = 1;
        fflush(stdout);
        int p[2];
        if (pipe(p) < 0) return 2;
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            dup2(p[1], 1);
            long r = attack(name);
            say(name, r);
            fflush(stdout);
            _exit(0);
        }
        close(p[1]);
        char buf[512];
        ssize_t n = read(p[0], buf, sizeof buf - 1);
        close(p[0]);
        int st;
        waitpid(pid, &st, 0);
        if (n > 0) {
            buf[n] = 0;
            fputs(buf, stdout);
        } else if (WIFSIGNALED(st)) {
            printf("%s: killed by %s\n", name, sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
        } else {
            printf("%s: no result\n", name);
        }
    }
    return 0;
}

static int cmd_setid(const char *f) {
    int fd = open(f, O_RDWR | O_CREAT, 0755);
    if (fd < 0) { printf("setid-open: %s\n", errname(errno)); return 1; }
    say("chmod_suid", chmod(f, 04755));
    say("chmod_sgid", chmod(f, 02755));
    say("fchmod_suid", fchmod(fd, 04755));
    say("fchmodat_suid", fchmodat(AT_FDCWD, f, 06755, 0));
    say("fchmodat2_suid", syscall(SYS_fchmodat2, AT_FDCWD, f, 04755, 0));
    char n2[4096];
    snprintf(n2, sizeof n2, "%s.creat", f);
    int c = open(n2, O_CREAT | O_WRONLY | O_EXCL, 06755);
    say("open_creat_suid", c);
    snprintf(n2, sizeof n2, "%s.mknod", f);
    say("mknod_suid", mknod(n2, S_IFREG | 04755, 0));
    snprintf(n2, sizeof n2, "%s.dir", f);
    say("mkdir_sgid", mkdir(n2, 02755));
    /* File capabilities (VFS_CAP_REVISION_2, cap_setuid permitted + effective). */
    unsigned char cap[20] = {0x01, 0x00, 0x00, 0x02, 0x80, 0, 0, 0};
    say("setxattr_capability", setxattr(f, "security.capability", cap, sizeof cap, 0));
    return 0;
}

static int sock_result(const char *name, int s, struct sockaddr *sa, socklen_t len) {
    if (s < 0) { printf("%s: %s\n", name, errname(errno)); return 0; }
    struct timeval tv = {3, 0};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(s, sa, len) == 0) printf("%s: connected\n", name);
    else printf("%s: %s\n", name, errname(errno));
    return 0;
}

static int fill_addr(const char *a, int port, struct sockaddr_storage *ss, socklen_t *len) {
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, a, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *len = sizeof *v4;
        return AF_INET;
    }
    if (inet_pton(AF_INET6, a, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *len = sizeof *v6;
        return AF_INET6;
    }
    fprintf(stderr, "bad address %s\n", a);
    exit(2);
}

static int cmd_tcp(const char *a, int port) {
    struct sockaddr_storage ss;
    socklen_t len;
    int fam = fill_addr(a, port, &ss, &len);
    return sock_result("tcp", socket(fam, SOCK_STREAM, 0), (struct sockaddr *)&ss, len);
}

static const unsigned char dnsq[] = {0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 6, 'e', 's', 'c',
                                     'a', 'p', 'e', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};

static int cmd_udp(const char *a, int port) {
    struct sockaddr_storage ss;
    socklen_t len;
    int fam = fill_addr(a, port, &ss, &len);
    int s = socket(fam, SOCK_DGRAM, 0);
    if (s < 0) { printf("udp: %s\n", errname(errno)); return 0; }
    int sent = 0;
    for (int i = 0; i < 3; i++)
        if (sendto(s, dnsq, sizeof dnsq, 0, (struct sockaddr *)&ss, len) > 0) sent++;
    if (sent) printf("udp: sent %d\n", sent);
    else printf("udp: %s\n", errname(errno));
    return 0;
}

static int cmd_unix(const char *path, int abstract) {
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    socklen_t len;
    if (abstract) {
        snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "%s", path);
        len = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(path);
    } else {
        snprintf(un.sun_path, sizeof un.sun_path, "%s", path);
        len = sizeof un;
    }
    return sock_result(abstract ? "abstract" : "unix", socket(AF_UNIX, SOCK_STREAM, 0),
                       (struct sockaddr *)&un, len);
}

static int connect_local(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct timeval tv = {10, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) return -1;
    return s;
}

static int cmd_proxy(int port, const char *line) {
    int s = connect_local(port);
    if (s < 0) { printf("proxy: %s\n", errname(errno)); return 0; }
    char req[4096];
    snprintf(req, sizeof req, "%s\r\n\r\n", line);
    if (write(s, req, strlen(req)) < 0) { printf("proxy: write %s\n", errname(errno)); return 0; }
    char buf[1024];
    ssize_t n = read(s, buf, sizeof buf - 1);
    if (n <= 0) { printf("proxy: closed\n"); return 0; }
    buf[n] = 0;
    char *eol = strstr(buf, "\r\n");
    if (eol) *eol = 0;
    printf("proxy: %s\n", buf);
    return 0;
}

static int cmd_socks(int port, int atyp, const char *host, int dport) {
    int s = connect_local(port);
    if (s < 0) { printf("socks: %s\n", errname(errno)); return 0; }
    unsigned char g[3] = {5, 1, 0}, r[512];
    if (write(s, g, 3) != 3 || read(s, r, 2) != 2) { printf("socks: closed\n"); return 0; }
    unsigned char req[300] = {5, 1, 0, (unsigned char)atyp};
    size_t n = 4;
    if (atyp == 1) { inet_pton(AF_INET, host, req + n); n += 4; }
    else if (atyp == 4) { inet_pton(AF_INET6, host, req + n); n += 16; }
    else { size_t l = strlen(host); req[n++] = (unsigned char)l; memcpy(req + n, host, l); n += l; }
    req[n++] = (unsigned char)(dport >> 8);
    req[n++] = (unsigned char)dport;
    if (write(s, req, n) != (ssize_t)n) { printf("socks: closed\n"); return 0; }
    ssize_t m = read(s, r, sizeof r);
    if (m < 2) { printf("socks: closed\n"); return 0; }
    printf("socks: reply %d\n", r[1]);
    return 0;
}

/* Walk ".." from a directory fd up to its root; report whether that root looks like the
   host's (has /var or /home, which the sandbox's rootfs does not). */
static const char *walk_root(int dfd) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY);
    if (fd < 0) return "unreadable";
    for (int i = 0; i < 64; i++) {
        int up = openat(fd, "..", O_RDONLY | O_DIRECTORY);
        if (up < 0) break;
        close(fd);
        fd = up;
    }
    struct stat st;
    int host = fstatat(fd, "var", &st, 0) == 0 || fstatat(fd, "home", &st, 0) == 0 ||
               fstatat(fd, "srv", &st, 0) == 0;
    close(fd);
    return host ? "HOST ROOT" : "sandbox root";
}

static int cmd_fdwalk(void) {
    int bad = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) { printf("fdwalk: %s\n", errname(errno)); return 0; }
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == self) continue;
        char link[4096] = "", p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(p, link, sizeof link - 1);
        if (n > 0) link[n] = 0;
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            const char *w = walk_root(fd);
            printf("fd %d -> %s: %s\n", fd, link, w);
            if (!strcmp(w, "HOST ROOT")) bad = 1;
        } else if (fd > 2) {
            printf("fd %d -> %s\n", fd, link);
        }
    }
    closedir(d);
    const char *w = walk_root(AT_FDCWD);
    printf("cwd: %s\n", w);
    if (!strcmp(w, "HOST ROOT")) bad = 1;
    printf("fdwalk: %s\n", bad ? "HOST ROOT REACHED" : "contained");
    return 0;
}

static int cmd_mmapw(const char *f) {
    int fd = open(f, O_RDONLY);
    if (fd < 0) { printf("mmapw: open %s\n", errname(errno)); return 0; }
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    printf("mmapw: %s\n", m == MAP_FAILED ? errname(errno) : "allowed");
    return 0;
}

static int cmd_reopen(const char *f) {
    int fd = open(f, O_PATH);
    if (fd < 0) { printf("reopen: open %s\n", errname(errno)); return 0; }
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int w = open(p, O_WRONLY);
    printf("reopen: %s\n", w < 0 ? errname(errno) : "allowed");
    return 0;
}

/* O_PATH on a directory, then the *at calls relative to it: create, mkdir, symlink, link
   and rename into it. */
static int cmd_opathat(const char *dir) {
    int d = open(dir, O_PATH | O_DIRECTORY);
    if (d < 0) { printf("opath: %s\n", errname(errno)); return 0; }
    say("openat_creat", openat(d, "escape-at", O_WRONLY | O_CREAT, 0644));
    say("mkdirat", mkdirat(d, "escape-dir", 0755));
    say("symlinkat", symlinkat("/tmp", d, "escape-link"));
    int f = open("README", O_RDONLY);
    say("linkat", linkat(f, "", d, "escape-hl", AT_EMPTY_PATH));
    say("renameat", renameat(AT_FDCWD, "README", d, "escape-ren"));
    return 0;
}

static int cmd_openw(const char *f) {
    int w = open(f, O_WRONLY);
    printf("openw: %s\n", w < 0 ? errname(errno) : "allowed");
    return 0;
}

static int cmd_handle(const char *hexfile) {
    FILE *h = fopen(hexfile, "r");
    if (!h) { printf("handle: no handle file\n"); return 2; }
    unsigned int type, bytes;
    char hex[512];
    if (fscanf(h, "%u %u %511s", &type, &bytes, hex) != 3 || bytes > 128) return 2;
    struct file_handle *fh = malloc(sizeof *fh + bytes);
    fh->handle_type = (int)type;
    fh->handle_bytes = bytes;
    for (unsigned i = 0; i < bytes; i++) sscanf(hex + 2 * i, "%2hhx", &fh->f_handle[i]);
    /* Any fd on the same filesystem will do as the mount fd: try the cwd and /. */
    int fd = open_by_handle_at(AT_FDCWD, fh, O_RDONLY);
    if (fd < 0) fd = open_by_handle_at(open(".", O_RDONLY), fh, O_RDONLY);
    if (fd < 0) { printf("handle: %s\n", errname(errno)); return 0; }
    char buf[128] = "";
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n > 0) buf[n] = 0;
    printf("handle: allowed [%s]\n", buf);
    return 0;
}

/* On the host: the handle of FILE, for `handle` to try from inside. */
static int cmd_mkhandle(const char *f, const char *out) {
    struct file_handle *fh = malloc(sizeof *fh + 128);
    fh->handle_bytes = 128;
    int mnt;
    if (name_to_handle_at(AT_FDCWD, f, fh, &mnt, 0) < 0) { perror("name_to_handle_at"); return 2; }
    FILE *o = fopen(out, "w");
    if (!o) return 2;
    fprintf(o, "%d %u ", fh->handle_type, fh->handle_bytes);
    for (unsigned i = 0; i < fh->handle_bytes; i++) fprintf(o, "%02x", fh->f_handle[i]);
    fprintf(o, "\n");
    return fclose(o) ? 2 : 0;
}

static int cmd_forkbomb(int n) {
    int made = 0, err = 0;
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) { pause(); _exit(0); }
        if (p < 0) { err = errno; break; }
        made++;
    }
    printf("forkbomb: %d children%s%s\n", made, err ? ", then " : "", err ? errname(err) : "");
    fflush(stdout);
    kill(0, SIGKILL);
    return 0;
}

static int cmd_alloc(int mib) {
    size_t got = 0;
    for (int i = 0; i < mib; i++) {
        char *p = malloc(1 << 20);
        if (!p) break;
        memset(p, 1, 1 << 20);
        got++;
    }
    printf("alloc: %zu MiB\n", got);
    return 0;
}

/* Does this process hold CAP_SYS_ADMIN? No sandbox tier grants it, so a probe that does is
   running on a host by mistake (say, the suite pointed at a "vetto" that sandboxes nothing):
   its attacks (kill(-1), mounts over /tmp, core_pattern) would hit the machine itself. */
static int holds_sys_admin(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long eff = ~0ULL;
    if (!f) return 1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1) break;
    fclose(f);
    return (eff >> 21) & 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) goto usage;
    const char *c = argv[1];
    if (strcmp(c, "mkhandle") && holds_sys_admin()) {
        fprintf(stderr, "escape-probe: this process holds CAP_SYS_ADMIN, so it is not in a sandbox; refusing to attack the host\n");
        return 3;
    }
    if (!strcmp(c, "sys")) return cmd_sys(argc - 2, argv + 2);
    if (!strcmp(c, "setid") && argc == 3) return cmd_setid(argv[2]);
    if (!strcmp(c, "tcp") && argc == 4) return cmd_tcp(argv[2], atoi(argv[3]));
    if (!strcmp(c, "udp") && argc == 4) return cmd_udp(argv[2], atoi(argv[3]));
    if (!strcmp(c, "unix") && argc == 3) return cmd_unix(argv[2], 0);
    if (!strcmp(c, "abstract") && argc == 3) return cmd_unix(argv[2], 1);
    if (!strcmp(c, "proxy") && argc == 4) return cmd_proxy(atoi(argv[2]), argv[3]);
    if (!strcmp(c, "socks") && argc == 6) return cmd_socks(atoi(argv[2]), atoi(argv[3]), argv[4], atoi(argv[5]));
    if (!strcmp(c, "fdwalk")) return cmd_fdwalk();
    if (!strcmp(c, "mmapw") && argc == 3) return cmd_mmapw(argv[2]);
    if (!strcmp(c, "reopen") && argc == 3) return cmd_reopen(argv[2]);
    if (!strcmp(c, "openw") && argc == 3) return cmd_openw(argv[2]);
    if (!strcmp(c, "opathat") && argc == 3) return cmd_opathat(argv[2]);
    if (!strcmp(c, "handle") && argc == 3) return cmd_handle(argv[2]);
    if (!strcmp(c, "mkhandle") && argc == 4) return cmd_mkhandle(argv[2], argv[3]);
    if (!strcmp(c, "kill") && argc == 3) { say("kill", kill(atoi(argv[2]), SIGKILL)); return 0; }
    if (!strcmp(c, "killall")) { say("killall", kill(-1, SIGKILL)); return 0; }
    if (!strcmp(c, "forkbomb") && argc == 3) return cmd_forkbomb(atoi(argv[2]));
    if (!strcmp(c, "alloc") && argc == 3) return cmd_alloc(atoi(argv[2]));
usage:
    fprintf(stderr, "usage: escape-probe sys|setid|tcp|udp|unix|abstract|proxy|socks|fdwalk|mmapw|reopen|openw|handle|kill|killall|forkbomb|alloc ...\n");
    return 2;
}
