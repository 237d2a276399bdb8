/*
 * svc-keep: keeps one durable process for the svc agent (docs/processes.md).
 *
 *   svc-keep DIR CAP SEGMENT [--pty COLS ROWS] [--stdin] [--cwd PATH] [--uid N] [--gid N]
 *            [--groups N,N,...] -- CMD [ARG...]
 *
 * It starts CMD in a process group of its own (a session of its own with a terminal for --pty)
 * and writes what CMD prints into journal files in DIR, so that the output outlives whoever
 * asked for it: the agent may be killed and started again, and the new one reads on from the
 * files. Each stream (stdout and stderr, or pty) is kept as segment files named
 * `<stream>.<first byte's offset, 20 digits>` of at most SEGMENT bytes; once a stream holds more
 * than CAP bytes its oldest segments are removed (a reader sees the first kept offset, and a gap
 * where a write failed, and says so). On a full disk the stream's oldest segments make room for
 * its newest bytes as they do at CAP; what still does not fit is lost, counted in the offsets,
 * and an empty segment at the stream's end says where the gap ends as soon as the bytes are lost.
 * When CMD has ended and its output has drained (or 300 ms after it ended, when something it
 * started still holds the pipes), `exit.json` appears: {"code":N} or {"signal":N}, with
 * "ended_at_ms". Its page is reserved when the keeper starts (exit.json.tmp), so a disk filled
 * meanwhile does not keep it from being written; where none could be reserved, the oldest output
 * makes room for it on a full disk.
 *
 * DIR/ctl (a FIFO) takes lines "resize COLS ROWS" and "eof"; with --stdin, DIR/stdin (a FIFO)
 * takes bytes for CMD's input. Both are held open for reading and writing here, so writers may
 * come and go. Signals go to CMD's process group straight from the agent (kill -PGID).
 *
 * On start it prints "ok PID KEEPER\n" (CMD's pid, which is also its process group, and its own)
 * or "error MESSAGE\n" on standard output and closes it. Built static (no NSS: supplementary groups come as numbers),
 * so it runs in any guest the agent runs in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define MAX_GROUPS 64
#define DRAIN_MS 300

struct journal {
  const char *name;
  int fd;           /* the segment being written, -1 before the first byte */
  uint64_t seg;     /* its first byte's offset */
  uint64_t end;     /* the stream's length so far */
  uint64_t *starts; /* kept segments, oldest first */
  int n, max;
};

static const char *dir;
static uint64_t cap, segsize;
static int sigpipe_fds[2];

static void die_start(const char *what) {
  printf("error %s: %s\n", what, strerror(errno));
  exit(1);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void seg_path(char *buf, size_t len, const char *name, uint64_t start) {
  snprintf(buf, len, "%s/%s.%020llu", dir, name, (unsigned long long)start);
}

/* Removes the stream's oldest kept segment: at its cap, or for room on a full disk. */
static void drop_oldest(struct journal *j) {
  char path[PATH_MAX];
  seg_path(path, sizeof path, j->name, j->starts[0]);
  unlink(path);
  memmove(j->starts, j->starts + 1, sizeof(uint64_t) * (size_t)(j->n - 1));
  j->n--;
}

static void open_segment(struct journal *j) {
  char path[PATH_MAX];
  if (j->fd >= 0) close(j->fd);
  seg_path(path, sizeof path, j->name, j->end);
  j->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  j->seg = j->end;
  if (j->fd < 0) return;
  if (j->n == j->max) drop_oldest(j); /* the stream holds at most max segments, CAP bytes */
  j->starts[j->n++] = j->end;
}

/*
 * After a failed write: the segment being written is removed when it is still empty (the disk was
 * full with nothing of this stream's to give back, or it failed otherwise), for the new one the
 * caller opens after the lost bytes. So a disk that stays full leaves one empty segment that says
 * where the stream is, not one per failed write; those took the stream's segment slots one by one.
 * A new file, not a rename: a follower that holds the empty one open would read what is written
 * next as if it were at the old offset.
 */
static void drop_if_empty(struct journal *j) {
  if (j->fd < 0 || j->n == 0 || j->starts[j->n - 1] != j->seg || lseek(j->fd, 0, SEEK_END) != 0) return;
  char path[PATH_MAX];
  seg_path(path, sizeof path, j->name, j->seg);
  unlink(path);
  j->n--;
}

static void journal_write(struct journal *j, const char *buf, size_t len) {
  while (len > 0) {
    if (j->fd < 0 || j->end - j->seg >= segsize) open_segment(j);
    size_t room = (size_t)(segsize - (j->end - j->seg));
    size_t part = len < room ? len : room;
    ssize_t w = j->fd >= 0 ? write(j->fd, buf, part) : -1;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == ENOSPC || errno == EDQUOT) && j->fd >= 0 && j->n > 1) {
      /* a full disk: the stream's oldest bytes make room for its newest, as at its cap */
      drop_oldest(j);
      continue;
    }
    if (w <= 0) {
      /*
       * Disk full or gone: these bytes are lost; the offsets go on, and an empty segment at the
       * stream's end says the gap at once, not at the stream's next byte (which may be long in
       * coming, or never: a process that ends next would have its last bytes lost unsaid).
       */
      j->end += part;
      drop_if_empty(j);
      open_segment(j); /* one that cannot be opened is tried again at the next write */
    } else {
      j->end += (uint64_t)w;
      part = (size_t)w;
    }
    buf += part;
    len -= part;
  }
}

static void on_chld(int sig) {
  (void)sig;
  int e = errno;
  ssize_t r = write(sigpipe_fds[1], "c", 1);
  (void)r;
  errno = e;
}

/*
 * exit.json's page, taken when the keeper starts (reserve_exit): the status is written into blocks
 * the file already has, so a disk filled while CMD ran cannot keep how it ended from being said.
 * -1 where the file system cannot reserve (no fallocate) or was full already.
 */
static int exit_fd = -1;

static void exit_paths(char *tmp, char *path) {
  snprintf(tmp, PATH_MAX, "%s/exit.json.tmp", dir);
  snprintf(path, PATH_MAX, "%s/exit.json", dir);
}

static void reserve_exit(void) {
  char tmp[PATH_MAX], path[PATH_MAX];
  exit_paths(tmp, path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (posix_fallocate(fd, 0, 4096) != 0) {
    close(fd);
    unlink(tmp);
    return;
  }
  exit_fd = fd;
}

/* The status into the reserved page; 0 when it is in place. */
static int write_reserved(const char *body, int n, const char *tmp, const char *path) {
  int fd = exit_fd;
  exit_fd = -1;
  int ok = pwrite(fd, body, (size_t)n, 0) == n && ftruncate(fd, n) == 0 && fsync(fd) == 0;
  close(fd);
  return ok && rename(tmp, path) == 0 ? 0 : -1;
}

/*
 * Writes exit.json whole or not at all: into the page reserved at the start, or, where there is
 * none, as a new file. On a full disk the streams' oldest segments then make room for it, one at
 * a time: how the process ended outranks its oldest output (without it a reader is told only that
 * the process was lost).
 */
static void write_exit(int status, struct journal *js, int njs) {
  char tmp[PATH_MAX], path[PATH_MAX], body[128];
  exit_paths(tmp, path);
  int n;
  if (WIFSIGNALED(status))
    n = snprintf(body, sizeof body, "{\"signal\":%d,\"ended_at_ms\":%lld}\n", WTERMSIG(status), (long long)now_ms());
  else
    n = snprintf(body, sizeof body, "{\"code\":%d,\"ended_at_ms\":%lld}\n", WEXITSTATUS(status), (long long)now_ms());
  if (exit_fd >= 0 && write_reserved(body, n, tmp, path) == 0) return;
  for (;;) {
    int err = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      err = errno;
    } else {
      ssize_t w = write(fd, body, (size_t)n);
      if (w != n) err = w < 0 ? errno : ENOSPC;
      else if (fsync(fd) != 0) err = errno;
      close(fd);
      if (!err && rename(tmp, path) == 0) return;
      if (!err) err = errno;
    }
    unlink(tmp);
    if (err != ENOSPC && err != EDQUOT) return;
    int k = 0;
    while (k < njs && js[k].n == 0) k++;
    if (k == njs) return; /* nothing of its own left to give back */
    if (js[k].fd >= 0 && js[k].starts[0] == js[k].seg) {
      close(js[k].fd);
      js[k].fd = -1;
    }
    drop_oldest(&js[k]);
  }
}

static void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int open_fifo(const char *name) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  unlink(path);
  if (mkfifo(path, 0600) < 0) die_start("mkfifo");
  int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die_start("open fifo");
  return fd;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: svc-keep DIR CAP SEGMENT [options] -- CMD [ARG...]\n");
    return 2;
  }
  closefrom(3); /* nothing the agent had open stays open for as long as CMD runs */
  dir = argv[1];
  cap = strtoull(argv[2], NULL, 10);
  segsize = strtoull(argv[3], NULL, 10);
  if (segsize < 4096) segsize = 4096;
  if (cap < segsize) cap = segsize;
  int pty = 0, with_stdin = 0, cols = 80, rows = 24, ngroups = -1;
  long uid = -1, gid = -1;
  gid_t groups[MAX_GROUPS];
  const char *cwd = NULL;
  int i = 4;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (!strcmp(argv[i], "--pty") && i + 2 < argc) {
      pty = 1;
      cols = atoi(argv[++i]);
      rows = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--stdin")) {
      with_stdin = 1;
    } else if (!strcmp(argv[i], "--cwd") && i + 1 < argc) {
      cwd = argv[++i];
    } else if (!strcmp(argv[i], "--uid") && i + 1 < argc) {
      uid = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--gid") && i + 1 < argc) {
      gid = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--groups") && i + 1 < argc) {
      ngroups = 0;
      for (char *p = argv[++i]; *p && ngroups < MAX_GROUPS;) {
        groups[ngroups++] = (gid_t)strtoul(p, &p, 10);
        if (*p == ',') p++;
        else break;
      }
    } else {
      printf("error unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (i + 1 >= argc) {
    printf("error no command\n");
    return 2;
  }
  char **cmd = argv + i + 1;
  setsid(); /* a session of its own (the agent's death is not ours); fails harmlessly if already */

  int out_r = -1, out_w = -1, err_r = -1, err_w = -1, in_r = -1, in_w = -1, slave = -1;
  if (pty) {
    out_r = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (out_r < 0 || grantpt(out_r) < 0 || unlockpt(out_r) < 0) die_start("openpt");
    const char *name = ptsname(out_r);
    if (!name) die_start("ptsname");
    slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) die_start("open pts");
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(out_r, TIOCSWINSZ, &ws);
    in_w = out_r;
  } else {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) die_start("pipe");
    out_r = p[0], out_w = p[1];
    if (pipe2(p, O_CLOEXEC) < 0) die_start("pipe");
    err_r = p[0], err_w = p[1];
    /* Room for a fast writer's bursts: fewer wake-ups and larger journal writes (best effort; the
       default limit for a user is 1 MiB). */
    fcntl(out_r, F_SETPIPE_SZ, 1 << 20);
    fcntl(err_r, F_SETPIPE_SZ, 1 << 20);
    if (with_stdin) {
      if (pipe2(p, O_CLOEXEC) < 0) die_start("pipe");
      in_r = p[0], in_w = p[1];
    }
  }
  int ctl = open_fifo("ctl");
  reserve_exit();
  int fifo_in = with_stdin ? open_fifo("stdin") : -1;
  int execpipe[2];
  if (pipe2(execpipe, O_CLOEXEC) < 0 || pipe2(sigpipe_fds, O_CLOEXEC) < 0) die_start("pipe");
  set_nonblock(sigpipe_fds[0]);
  set_nonblock(sigpipe_fds[1]);
  struct sigaction sa = {0};
  sa.sa_handler = on_chld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);

  pid_t child = fork();
  if (child < 0) die_start("fork");
  if (child == 0) {
    signal(SIGPIPE, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    if (pty) {
      setsid();
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0), dup2(slave, 1), dup2(slave, 2);
    } else {
      setpgid(0, 0);
      int devnull = open("/dev/null", O_RDONLY);
      dup2(with_stdin ? in_r : devnull, 0);
      dup2(out_w, 1);
      dup2(err_w, 2);
    }
    /* what failed, and its errno, for the parent to say */
    int e[2] = {0, 0};
    if (cwd && chdir(cwd) < 0) e[0] = 1, e[1] = errno;
    if (!e[0] && gid >= 0 && ngroups >= 0 && setgroups((size_t)ngroups, groups) < 0) e[0] = 2, e[1] = errno;
    if (!e[0] && gid >= 0 && setgid((gid_t)gid) < 0) e[0] = 2, e[1] = errno;
    if (!e[0] && uid >= 0 && setuid((uid_t)uid) < 0) e[0] = 3, e[1] = errno;
    if (!e[0]) {
      execvp(cmd[0], cmd);
      e[0] = 4, e[1] = errno;
    }
    ssize_t w = write(execpipe[1], e, sizeof e);
    (void)w;
    _exit(127);
  }
  close(execpipe[1]);
  if (slave >= 0) close(slave);
  if (out_w >= 0) close(out_w);
  if (err_w >= 0) close(err_w);
  if (in_r >= 0) close(in_r);
  int e[2] = {0, 0};
  ssize_t got;
  do got = read(execpipe[0], e, sizeof e);
  while (got < 0 && errno == EINTR);
  close(execpipe[0]);
  if (got == (ssize_t)sizeof e) {
    waitpid(child, NULL, 0);
    if (e[0] == 1) printf("error cannot change to %s: %s\n", cwd, strerror(e[1]));
    else if (e[0] == 2) printf("error cannot take group %ld: %s\n", gid, strerror(e[1]));
    else if (e[0] == 3) printf("error cannot become user %ld: %s\n", uid, strerror(e[1]));
    else printf("error cannot start %s: %s\n", cmd[0], strerror(e[1]));
    return 1;
  }
  printf("ok %d %d\n", (int)child, (int)getpid());
  fflush(stdout);
  int devnull = open("/dev/null", O_RDWR);
  dup2(devnull, 1);
  dup2(devnull, 2);
  dup2(devnull, 0);

  int maxsegs = (int)(cap / segsize);
  if (maxsegs < 1) maxsegs = 1;
  struct journal js[2] = {
      {.name = pty ? "pty" : "stdout", .fd = -1, .max = maxsegs},
      {.name = "stderr", .fd = -1, .max = maxsegs},
  };
  for (int k = 0; k < 2; k++) js[k].starts = calloc((size_t)maxsegs, sizeof(uint64_t));
  int srcs[2] = {out_r, err_r};
  set_nonblock(out_r);
  if (err_r >= 0) set_nonblock(err_r);
  if (in_w >= 0 && !pty) set_nonblock(in_w);

  static char buf[1 << 18];
  char ctlbuf[256];
  size_t ctllen = 0;
  char *pending = NULL; /* stdin bytes CMD has not taken yet */
  size_t pendlen = 0, pendoff = 0;
  int status = 0, exited = 0, eof_wanted = 0;
  int64_t drain_until = 0;
  for (;;) {
    struct pollfd p[6];
    int np = 0, idx_src[2] = {-1, -1}, idx_ctl, idx_sig, idx_fin = -1, idx_inw = -1;
    for (int k = 0; k < 2; k++)
      if (srcs[k] >= 0) idx_src[k] = np, p[np++] = (struct pollfd){.fd = srcs[k], .events = POLLIN};
    idx_ctl = np, p[np++] = (struct pollfd){.fd = ctl, .events = POLLIN};
    idx_sig = np, p[np++] = (struct pollfd){.fd = sigpipe_fds[0], .events = POLLIN};
    if (fifo_in >= 0 && in_w >= 0 && pendlen == 0) idx_fin = np, p[np++] = (struct pollfd){.fd = fifo_in, .events = POLLIN};
    if (in_w >= 0 && pendlen > 0) idx_inw = np, p[np++] = (struct pollfd){.fd = in_w, .events = POLLOUT};
    int timeout = -1;
    if (exited) {
      int64_t left = drain_until - mono_ms();
      if (left <= 0 || (srcs[0] < 0 && srcs[1] < 0)) break;
      timeout = (int)left;
    }
    int r = poll(p, (nfds_t)np, timeout);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    for (int k = 0; k < 2; k++) {
      if (idx_src[k] < 0 || !(p[idx_src[k]].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(srcs[k], buf, sizeof buf);
      if (n > 0) {
        journal_write(&js[k], buf, (size_t)n);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        /* EOF, or EIO on a terminal whose other side is closed */
        if (!(pty && k == 0 && in_w == srcs[k])) close(srcs[k]);
        srcs[k] = -1;
      }
    }
    if (p[idx_sig].revents & POLLIN) {
      while (read(sigpipe_fds[0], buf, sizeof buf) > 0) {
      }
      if (!exited && waitpid(child, &status, WNOHANG) == child) {
        exited = 1;
        drain_until = mono_ms() + DRAIN_MS;
      }
    }
    if (p[idx_ctl].revents & POLLIN) {
      ssize_t n = read(ctl, ctlbuf + ctllen, sizeof ctlbuf - 1 - ctllen);
      if (n > 0) ctllen += (size_t)n;
      char *nl;
      while ((nl = memchr(ctlbuf, '\n', ctllen)) != NULL) {
        *nl = 0;
        int c, rr;
        if (sscanf(ctlbuf, "resize %d %d", &c, &rr) == 2 && pty) {
          struct winsize ws = {.ws_row = (unsigned short)rr, .ws_col = (unsigned short)c};
          ioctl(out_r >= 0 ? out_r : in_w, TIOCSWINSZ, &ws);
        } else if (!strcmp(ctlbuf, "eof") && in_w >= 0) {
          eof_wanted = 1; /* carried out below, once the input sent before it is passed on */
        }
        size_t used = (size_t)(nl - ctlbuf) + 1;
        memmove(ctlbuf, ctlbuf + used, ctllen - used);
        ctllen -= used;
      }
      if (ctllen == sizeof ctlbuf - 1) ctllen = 0; /* a line too long: dropped */
    }
    if (idx_fin >= 0 && (p[idx_fin].revents & POLLIN)) {
      ssize_t n = read(fifo_in, buf, sizeof buf);
      if (n > 0) {
        pending = realloc(pending, (size_t)n);
        memcpy(pending, buf, (size_t)n);
        pendlen = (size_t)n, pendoff = 0;
      }
    }
    if (pendlen > 0 && in_w >= 0 && (idx_inw < 0 || (p[idx_inw].revents & (POLLOUT | POLLERR | POLLHUP)))) {
      ssize_t w = write(in_w, pending + pendoff, pendlen - pendoff);
      if (w > 0) pendoff += (size_t)w;
      else if (w < 0 && errno != EAGAIN && errno != EINTR) pendoff = pendlen; /* CMD closed its input */
      if (pendoff == pendlen) pendlen = pendoff = 0;
    }
    /* The end of input comes after every byte sent before it. The agent writes all of the input
       into the stdin FIFO before it sends "eof", but both FIFOs can be ready in one poll round and
       "eof" is read first: so the FIFO is drained (and what it held passed on) before CMD's input
       is closed, or, on a terminal, before ^D is typed. */
    if (eof_wanted && in_w >= 0 && pendlen == 0) {
      ssize_t n = fifo_in >= 0 ? read(fifo_in, buf, sizeof buf) : -1;
      if (n > 0) {
        pending = realloc(pending, (size_t)n);
        memcpy(pending, buf, (size_t)n);
        pendlen = (size_t)n, pendoff = 0;
      } else if (pty) {
        char eof = 4; /* ^D at the start of a line: the terminal's end of input */
        ssize_t w = write(in_w, &eof, 1);
        (void)w;
        eof_wanted = 0;
      } else {
        close(in_w);
        in_w = -1;
        eof_wanted = 0;
      }
    }
  }
  if (!exited) waitpid(child, &status, 0);
  for (int k = 0; k < 2; k++)
    if (js[k].fd >= 0) fsync(js[k].fd);
  write_exit(status, js, 2);
  return 0;
}
