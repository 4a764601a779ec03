/* probe: what a hostile step tries, one check per argument, one line of
 * output each: "<check> ok" when the call succeeded, "<check> <errno name>"
 * when it failed. Built by the sandbox and e2e tests with the machine's C
 * compiler and bound into the steps' view (-ro-bind). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <mqueue.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef F_SETSIG
#define F_SETSIG 10
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

#define IPCKEY 0x41495243 /* "AIRC" */

static void report(const char *name, long rc) {
	if (rc >= 0)
		printf("%s ok\n", name);
	else
		printf("%s %s\n", name, strerrorname_np(errno));
}

static long unix_connect(const char *path) {
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, path, sizeof a.sun_path - 1);
	long rc = connect(fd, (struct sockaddr *)&a, sizeof a);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

/* unix_dgram sends one datagram to the unix socket at path. */
static long unix_dgram(const char *path) {
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, path, sizeof a.sun_path - 1);
	long rc = sendto(fd, "x", 1, 0, (struct sockaddr *)&a, sizeof a);
	int e = errno;
	close(fd);
	errno = e;
	return rc;
}

/* unix_read connects to the unix socket at path and prints what it reads
 * first: "read:<path> ok-<letters and digits read>", or the errno. */
static void unix_read(const char *path) {
	char buf[64];
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, path, sizeof a.sun_path - 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		printf("read:%s %s\n", path, strerrorname_np(errno));
		return;
	}
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	int k = 0;
	for (ssize_t i = 0; i < n; i++)
		if ((buf[i] >= 'a' && buf[i] <= 'z') || (buf[i] >= 'A' && buf[i] <= 'Z') || (buf[i] >= '0' && buf[i] <= '9'))
			buf[k++] = buf[i];
	buf[k] = 0;
	printf("read:%s ok-%s\n", path, buf);
}

/* unix_self listens on a unix socket it makes at path, connects to it and
 * accepts: a step's own socket. */
static long unix_self(const char *path) {
	int l = socket(AF_UNIX, SOCK_STREAM, 0), c = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	strncpy(a.sun_path, path, sizeof a.sun_path - 1);
	unlink(path);
	if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
	    connect(c, (struct sockaddr *)&a, sizeof a) < 0)
		return -1;
	long rc = accept(l, NULL, NULL);
	unlink(path);
	return rc;
}

/* forge sends every signal, 1 to 64, to every thread of the slot's helper
 * (PID 1 of the step's namespace) in every way a process of the same uid
 * can: rt_tgsigqueueinfo and rt_sigqueueinfo with each negative si_code a
 * sender may forge (SI_QUEUE, SI_MESGQ, SI_ASYNCIO, SI_SIGIO, SI_DETHREAD,
 * SI_ASYNCNL, an unknown one), tgkill (SI_TKILL), kill and
 * pidfd_send_signal (SI_USER and SI_QUEUE), and a pipe's F_SETSIG owner
 * (SI_SIGIO). With only, just the signals of a crash: SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL, SIGABRT, SI_QUEUE and SI_TKILL. It prints how many
 * threads it found and how many sends the kernel accepted and refused. */
static void forge(const char *name, int only) {
	static const int codes[] = {SI_QUEUE, SI_MESGQ, SI_ASYNCIO, SI_SIGIO, -7 /* SI_DETHREAD */, SI_ASYNCNL, -1000};
	static const int crash[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	int tids[256], nt = 0, sent = 0, refused = 0, firsterr = 0;
	DIR *d = opendir("/proc/1/task");
	struct dirent *e;
	while (d && (e = readdir(d)) && nt < 256)
		if (atoi(e->d_name) > 0)
			tids[nt++] = atoi(e->d_name);
	if (d)
		closedir(d);
#define SENT(rc) do { if ((rc) == 0) sent++; else { refused++; if (!firsterr) firsterr = errno; } } while (0)
	int pidfd = syscall(SYS_pidfd_open, 1, 0);
	int pipefd[2] = {-1, -1};
	if (!only && pipe(pipefd) == 0)
		fcntl(pipefd[0], F_SETFL, O_ASYNC | O_NONBLOCK);
	int nsig = only ? (int)(sizeof crash / sizeof crash[0]) : 64;
	for (int k = 0; k < nsig; k++) {
		int sig = only ? crash[k] : k + 1;
		for (int t = 0; t < nt; t++) {
			for (unsigned c = 0; c < (only ? 1 : sizeof codes / sizeof codes[0]); c++) {
				siginfo_t si;
				memset(&si, 0, sizeof si);
				si.si_signo = sig;
				si.si_code = codes[c];
				si.si_pid = getpid();
				si.si_uid = getuid();
				SENT(syscall(SYS_rt_tgsigqueueinfo, 1, tids[t], sig, &si));
				if (!only)
					SENT(syscall(SYS_rt_sigqueueinfo, tids[t], sig, &si));
			}
			SENT(syscall(SYS_tgkill, 1, tids[t], sig));
			if (!only && pipefd[0] >= 0) {
				struct f_owner_ex o = {F_OWNER_TID, tids[t]};
				char b = 0;
				if (fcntl(pipefd[0], F_SETSIG, sig) == 0 && fcntl(pipefd[0], F_SETOWN_EX, &o) == 0 &&
				    write(pipefd[1], &b, 1) == 1 && read(pipefd[0], &b, 1) == 1)
					sent++;
				else
					SENT(-1);
			}
		}
		if (!only) {
			SENT(kill(1, sig));
			if (pidfd >= 0) {
				siginfo_t si;
				memset(&si, 0, sizeof si);
				si.si_signo = sig;
				si.si_code = SI_QUEUE;
				si.si_pid = getpid();
				si.si_uid = getuid();
				SENT(syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0));
				SENT(syscall(SYS_pidfd_send_signal, pidfd, sig, &si, 0));
			}
		}
	}
#undef SENT
	usleep(300000); /* let the helper die, if it does */
	printf("%s threads %d sent %d refused %d %s\n", name, nt, sent, refused, firsterr ? strerrorname_np(firsterr) : "-");
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		const char *c = argv[i];
		if (!strcmp(c, "unshare-user"))
			report(c, unshare(CLONE_NEWUSER));
		else if (!strcmp(c, "unshare-net"))
			report(c, unshare(CLONE_NEWNET));
		else if (!strcmp(c, "unshare-files"))
			report(c, unshare(CLONE_FILES));
		else if (!strcmp(c, "clone-newns")) {
			long pid = syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0);
			if (pid == 0)
				_exit(0);
			report(c, pid);
		} else if (!strcmp(c, "clone3")) {
			struct { unsigned long long flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls; } args = {0};
			args.exit_signal = SIGCHLD;
			long pid = syscall(SYS_clone3, &args, sizeof args);
			if (pid == 0)
				_exit(0);
			report(c, pid);
		} else if (!strcmp(c, "fork"))
			report(c, fork() == 0 ? (_exit(0), 0) : 0);
		else if (!strcmp(c, "setns"))
			report(c, syscall(SYS_setns, 0, 0));
		else if (!strcmp(c, "mount"))
			report(c, mount("none", "/workspace/tmp", "tmpfs", 0, ""));
		else if (!strcmp(c, "pivot_root"))
			report(c, syscall(SYS_pivot_root, "/workspace", "/workspace/tmp"));
		else if (!strcmp(c, "open_tree"))
			report(c, syscall(SYS_open_tree, AT_FDCWD, "/usr", 1));
		else if (!strcmp(c, "fsopen"))
			report(c, syscall(SYS_fsopen, "tmpfs", 0));
		else if (!strcmp(c, "add_key"))
			report(c, syscall(SYS_add_key, "user", "airlock-probe", "secret", 6, -4 /* KEY_SPEC_USER_KEYRING */));
		else if (!strcmp(c, "keyctl-read-user")) {
			char buf[256];
			long rc = syscall(SYS_keyctl, 11 /* KEYCTL_READ */, -4, buf, sizeof buf);
			if (rc >= 0)
				printf("%s ok %ld\n", c, rc);
			else
				report(c, rc);
		} else if (!strcmp(c, "request_key"))
			report(c, syscall(SYS_request_key, "user", "airlock-probe", 0, 0));
		else if (!strcmp(c, "io_uring_setup")) {
			struct io_uring_params p;
			memset(&p, 0, sizeof p);
			report(c, syscall(SYS_io_uring_setup, 4, &p));
		} else if (!strcmp(c, "bpf"))
			report(c, syscall(SYS_bpf, 0, 0, 0));
		else if (!strcmp(c, "userfaultfd"))
			report(c, syscall(SYS_userfaultfd, 0));
		else if (!strcmp(c, "perf_event_open"))
			report(c, syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
		else if (!strcmp(c, "personality-exec"))
			report(c, personality(READ_IMPLIES_EXEC));
		else if (!strcmp(c, "personality-query"))
			report(c, personality(0xffffffff));
		else if (!strcmp(c, "socket-vsock"))
			report(c, socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
		else if (!strcmp(c, "socket-packet"))
			report(c, socket(AF_PACKET, SOCK_RAW, 0));
		else if (!strcmp(c, "socket-netlink-route"))
			report(c, socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */));
		else if (!strcmp(c, "socket-netlink-netfilter"))
			report(c, socket(AF_NETLINK, SOCK_RAW, 12 /* NETLINK_NETFILTER */));
		else if (!strcmp(c, "socket-inet"))
			report(c, socket(AF_INET, SOCK_STREAM, 0));
		else if (!strcmp(c, "socket-unix"))
			report(c, socket(AF_UNIX, SOCK_STREAM, 0));
		else if (!strcmp(c, "socket-mptcp"))
			report(c, socket(AF_INET, SOCK_STREAM, 262 /* IPPROTO_MPTCP */));
		else if (!strcmp(c, "socket-mptcp6"))
			report(c, socket(AF_INET6, SOCK_STREAM, 262));
		else if (!strcmp(c, "socket-mptcp-highbits"))
			report(c, syscall(SYS_socket, AF_INET, SOCK_STREAM, 0x100000106L));
		else if (!strcmp(c, "socket-vsock-highbits"))
			report(c, syscall(SYS_socket, 0x100000028L, SOCK_STREAM, 0));
		else if (!strncmp(c, "connect=", 8)) {
			printf("connect ");
			report(c + 8, unix_connect(c + 8));
		} else if (!strncmp(c, "dgram=", 6))
			report(c, unix_dgram(c + 6));
		else if (!strncmp(c, "read=", 5))
			unix_read(c + 5);
		else if (!strncmp(c, "unix-self=", 10))
			report(c, unix_self(c + 10)); else if (!strcmp(c, "shm-make"))
			report(c, shmget(IPCKEY, 1 << 20, IPC_CREAT | 0600));
		else if (!strcmp(c, "shm-find"))
			report(c, shmget(IPCKEY, 0, 0));
		else if (!strcmp(c, "sem-make"))
			report(c, semget(IPCKEY, 1, IPC_CREAT | 0600));
		else if (!strcmp(c, "sem-find"))
			report(c, semget(IPCKEY, 0, 0));
		else if (!strcmp(c, "msg-make"))
			report(c, msgget(IPCKEY, IPC_CREAT | 0600));
		else if (!strcmp(c, "msg-find"))
			report(c, msgget(IPCKEY, 0));
		else if (!strcmp(c, "mq-make"))
			report(c, mq_open("/airlock-probe", O_CREAT | O_RDWR, 0600, NULL));
		else if (!strcmp(c, "mq-find"))
			report(c, mq_open("/airlock-probe", O_RDONLY));
		else if (!strcmp(c, "fds")) {
			/* every open descriptor but the one opendir uses */
			for (int fd = 0; fd < 1024; fd++)
				if (fcntl(fd, F_GETFD) >= 0)
					printf("fd %d\n", fd);
		} else if (!strcmp(c, "signal-helper")) {
			/* the signals that crash a Go program, sent to every thread
			 * of the slot's helper (PID 1 of the step's namespace) */
			int sigs[] = {SIGTRAP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGQUIT};
			int sent = 0, refused = 0;
			DIR *d = opendir("/proc/1/task");
			struct dirent *e;
			while (d && (e = readdir(d))) {
				int tid = atoi(e->d_name);
				if (tid <= 0)
					continue;
				for (unsigned k = 0; k < sizeof sigs / sizeof sigs[0]; k++) {
					if (syscall(SYS_tgkill, 1, tid, sigs[k]) == 0)
						sent++;
					else
						refused++;
				}
			}
			if (d)
				closedir(d);
			usleep(200000); /* let the helper die, if it does */
			printf("signal-helper sent %d refused %d\n", sent, refused);
		} else if (!strcmp(c, "forge-signals"))
			forge(c, 0);
		else if (!strcmp(c, "forge-crash-signals"))
			forge(c, 1);
		else if (!strcmp(c, "tamper-rlimit")) {
			/* lower the helper's stack and descriptor limits */
			struct rlimit r = {65536, 65536};
			long rc = prlimit(1, RLIMIT_STACK, &r, NULL);
			if (rc == 0) {
				struct rlimit n = {64, 64};
				rc = prlimit(1, RLIMIT_NOFILE, &n, NULL);
			}
			report("tamper-rlimit", rc);
		} else if (!strcmp(c, "prlimit-helper")) {
			/* RLIMIT_CPU at 0 for every thread of the helper: the kernel
			 * would SIGKILL it at its next tick on a CPU */
			int ok = 0, refused = 0, firsterr = 0;
			DIR *d = opendir("/proc/1/task");
			struct dirent *e;
			struct rlimit r = {0, 0};
			while (d && (e = readdir(d)))
				if (atoi(e->d_name) > 0) {
					if (prlimit(atoi(e->d_name), RLIMIT_CPU, &r, NULL) == 0)
						ok++;
					else {
						refused++;
						if (!firsterr)
							firsterr = errno;
					}
				}
			if (d)
				closedir(d);
			printf("prlimit-helper ok %d refused %d %s\n", ok, refused, firsterr ? strerrorname_np(firsterr) : "-");
		} else if (!strcmp(c, "tamper-nice")) {
			/* renice every thread of the helper */
			int ok = 0;
			DIR *d = opendir("/proc/1/task");
			struct dirent *e;
			while (d && (e = readdir(d)))
				if (atoi(e->d_name) > 0 && setpriority(PRIO_PROCESS, atoi(e->d_name), 19) == 0)
					ok++;
			if (d)
				closedir(d);
			printf("tamper-nice %d\n", ok);
		} else if (!strcmp(c, "limits")) {
			struct rlimit r;
			getrlimit(RLIMIT_STACK, &r);
			printf("stack %llu nice %d\n", (unsigned long long)r.rlim_cur, getpriority(PRIO_PROCESS, 0));
		} else if (!strcmp(c, "int80")) {
			/* getpid through the i386 ABI */
			long rc;
			__asm__ volatile("int $0x80" : "=a"(rc) : "a"(20) : "memory");
			printf("int80 returned %ld\n", rc);
		} else
			printf("%s unknown\n", c);
		fflush(stdout);
	}
	return 0;
}
